#!/bin/bash
if [ -f /app/done ]; then echo '{"reward": true}' > /logs/verifier/reward.json; else echo '{"reward": false}' > /logs/verifier/reward.json; fi
