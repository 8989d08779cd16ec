"""Tracking: MLflow parent/child runs (the Hydra callback), the local spool, the run signature and
secret masking.
"""
