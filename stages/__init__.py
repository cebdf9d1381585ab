"""Training and evaluation stages: plain functions over models and data; flows/ orchestrates them."""
