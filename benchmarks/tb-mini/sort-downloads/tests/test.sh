#!/bin/bash
# Harbor verifier: writes 1 to /logs/verifier/reward.txt when every test in test_outputs.py passes,
# else 0. Under termforge's native runner the clean launcher /verifier/run-tests is used (it proves
# the tests ran); under Harbor (docker) the image's own python3 -m pytest.
mkdir -p /logs/verifier
if [ -x /verifier/run-tests ]; then
  runner=(/verifier/run-tests)
else
  runner=(python3 -m pytest -q -rA -p no:cacheprovider)
fi
if "${runner[@]}" /tests/test_outputs.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
