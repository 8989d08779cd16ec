"""Rank-side code: the worker entry point, process-group helpers, model building and fault
injection.
"""
