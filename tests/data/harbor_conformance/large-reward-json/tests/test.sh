#!/bin/bash
if [ -f /app/done ]; then r=1; else r=0; fi
{ printf '{"reward": %s' "$r"; printf '%9000s' "" ; echo "}"; } > /logs/verifier/reward.json
