"""distbench: which parallelism strategy gives the best speed, memory and cost, measured.

python run.py -m strategy=dp,tp,zero3 world_size=2,4
"""
