"""The CPU threads one rank gets: the launcher sets them (OMP_NUM_THREADS) and a probe on a CPU
measures with as many, so that its figures are the rank's (oversubscription costs 3x on CPU).

    python -c "from distbench.probes.threads import rank_threads; print(rank_threads(16, 4))"
"""

from __future__ import annotations


def rank_threads(num_cores: int, ranks_sharing_cores: int) -> int:
    """The CPU threads of one rank: the cores split between the ranks that share them."""
    return max(1, num_cores // ranks_sharing_cores)


def ranks_sharing_machine(rank_launcher: str, world_size: int, ranks_per_node: int) -> int:
    """Ranks on one machine: every rank under local_nodes (its "nodes" are this machine), else
    a node's."""
    return world_size if rank_launcher == "local_nodes" else ranks_per_node
