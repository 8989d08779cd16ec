"""Strategy families: each turns a config into a wrapped model (see deepspeed.py)."""
