# Shared by the steps: each step's /tests holds it.
reward() { if "$@"; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi; }
