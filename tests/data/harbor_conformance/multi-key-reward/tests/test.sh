#!/bin/bash
# reward.json wins over reward.txt; every key is kept.
if [ -f /app/done ]; then r=1; else r=0; fi
printf '{"reward": %s, "style": 0.5}\n' "$r" > /logs/verifier/reward.json
echo 0 > /logs/verifier/reward.txt
