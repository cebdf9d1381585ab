"""Cross-stage on-policy distillation: the RL stages' final checkpoints teach one student (entry: train.py)."""
