"""The outcome reward model: a scalar head on a GLM-5 trunk, trained with the Bradley–Terry loss (entry: train.py)."""
