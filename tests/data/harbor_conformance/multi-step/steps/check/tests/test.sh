#!/bin/bash
if grep -q ok /app/done; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
