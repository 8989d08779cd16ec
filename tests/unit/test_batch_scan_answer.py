"""The batch-size scan's answer (tools/summary.py's largest_fitting_batches): per (strategy,
world size) that hit an OOM, the largest micro batch that finished. The real scan runs in
tests/e2e/test_batch_scan.py.

    pytest tests/unit/test_batch_scan_answer.py
"""

from __future__ import annotations

import pytest

from distbench.tools.summary import largest_fitting_batches

pytestmark = pytest.mark.unit


def outcome(strategy: str, micro_batch_size: int, status: str = "FINISHED", kind=None) -> dict:
    found = {"strategy": strategy, "world_size": "2", "micro_batch_size": micro_batch_size}
    return {**found, "status": status, "failure_kind": kind}


def test_the_largest_finished_batch_of_each_group_that_hit_an_oom():
    outcomes = [
        outcome("dp", 4),
        outcome("dp", 1),
        outcome("dp", 64, "FAILED", "oom"),
        outcome("dp", 2),
        outcome("dp", 8, "FAILED", "crash"),  # finished neither: not an answer
        outcome("zero3", 16, "FAILED", "oom"),
        outcome("zero3", 8),
        outcome("tp", 32),  # no OOM in its group: no scan to answer
    ]
    assert largest_fitting_batches(outcomes) == {("dp", "2"): 4, ("zero3", "2"): 8}
