# Write 1 as the reward, then make the file and its folder read-only so the honest write fails.
mkdir -p /logs/verifier 2>/dev/null
rm -rf /logs/verifier/reward.txt /logs/verifier/reward.json 2>/dev/null
echo 1 > /logs/verifier/reward.txt 2>/dev/null
echo '{"reward": 1}' > /logs/verifier/reward.json 2>/dev/null
chmod 444 /logs/verifier/reward.txt /logs/verifier/reward.json 2>/dev/null
chmod 555 /logs/verifier 2>/dev/null
