"""Real services (a SLURM cluster, a database) started on this machine for tests."""
