#!/bin/bash
# Runs from the task's WORKDIR; the reward is 1 only when every test passes.
if [ "$PWD" = "/" ]; then
    echo "test.sh must run from the task's WORKDIR" >&2
    exit 1
fi

pytest /tests/test_outputs.py -rA

if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
