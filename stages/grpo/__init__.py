"""GRPO + IcePop, shared by reasoning RL (reasoning.py) and general RL (general.py); the loop is loop.py."""
