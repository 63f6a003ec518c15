#!/bin/bash
if [ -f /app/done ]; then echo nan > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
