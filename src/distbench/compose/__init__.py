"""Compose and resolve: the typed schemas Hydra composes, hardware resolution, the run signature
inputs.
"""
