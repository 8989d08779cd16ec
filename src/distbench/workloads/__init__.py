"""Workloads a worker rank runs (train for now)."""
