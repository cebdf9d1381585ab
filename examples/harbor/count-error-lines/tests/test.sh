#!/bin/bash
# Reward 1 when error_count.txt holds the number of ERROR lines of server.log (the hidden fixture), else 0.
mkdir -p /logs/verifier
expected="$(cat /tests/expected_count)"
if [ -f error_count.txt ] && [ "$(tr -d '[:space:]' < error_count.txt)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "error_count.txt: wanted $expected"
  echo 0 > /logs/verifier/reward.txt
fi
