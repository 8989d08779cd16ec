"""Hydra plugin package of distbench: `hydra/launcher=slurm` (see launcher.py)."""
