"""The CPU threads one rank gets: the launcher sets them (OMP_NUM_THREADS) and a probe on a CPU
measures with as many, so that its figures are the rank's (oversubscription costs 3x on CPU).
The rules are the planner's (figures/step_time.py), which prices the oversubscription with them.

    python -c "from distbench.probes.threads import rank_threads; print(rank_threads(16, 4))"
"""

from __future__ import annotations

from distbench.figures.step_time import rank_threads, ranks_sharing_machine

__all__ = ["rank_threads", "ranks_sharing_machine"]
