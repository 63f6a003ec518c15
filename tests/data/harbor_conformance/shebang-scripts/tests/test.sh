#!/usr/bin/python3
import os
with open("/logs/verifier/reward.txt", "w") as f:
    f.write("1" if os.path.exists("/app/done") else "0")
