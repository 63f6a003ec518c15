#!/bin/bash
if [ -n "$EXPECTED" ] && [ "$MODE" = strict ] && [ "$(cat /app/answer 2>/dev/null)" = "$EXPECTED" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
