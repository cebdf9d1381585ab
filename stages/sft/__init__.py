"""SFT: masked next-token training on chat@1 conversations with GLM-5's DSA schedule (entry: train.py)."""
