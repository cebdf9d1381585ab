#!/bin/bash
# Reward 1 when pytest passes the checks of test_outputs.py on the working folder, else 0.
mkdir -p /logs/verifier
# Only pytest itself, as in the task's image: not the plugins of whatever machine runs the tests.
if PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -m pytest -q -p no:cacheprovider /tests/test_outputs.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
