#!/bin/bash
if [ -f /app/check-ready ] && grep -qx "$MARK" /app/done; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
