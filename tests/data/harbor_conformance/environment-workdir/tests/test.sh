#!/bin/bash
if [ "$PWD" = /app/work ] && [ -f /app/work/marker ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
