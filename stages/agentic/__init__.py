"""Agentic RL: asynchronous multi-turn rollouts against task services, trained with direct
double-sided importance sampling (entry: train.py)."""
