"""The equivalence check catches a strategy that computes something else: with a deliberately
wrong data split (every replica trains on replica 0's rows) the first-step loss leaves the
single-device reference and the run is tagged equivalent=false. The sound run of the same
strategy (equivalent=true, the same reference) is the session's grid sweep's job.

One engine is enough here: the wrong split is injected where every engine's replicas read their
rows (workloads/train/workload.py, ranks/faults.py) and the check compares the losses any engine
writes with the reference (workloads/train/equivalence.py); every strategy's sound run of both
engines is checked equivalent in tests/e2e/test_engines_sweep.py.

    pytest tests/distributed/test_equivalence_check.py
"""

from __future__ import annotations

import pytest

from distbench.orchestrator import run_job
from distbench.workloads.train.equivalence import TOLERANCE
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config

pytestmark = pytest.mark.distributed

FAST = ["tracking=none", "workload.num_warmup_steps=0", "workload.num_steps=1", "world_size=2"]


def test_a_wrong_split_is_caught_as_not_equivalent(tmp_path, grid_sweep):
    broken = run_job(
        compose_config([*FAST, "strategy=ddp", "fault.kind=wrong_split"]),
        tmp_path / "broken",
        CONF_DIR,
        PROJECT_DIR,
    )
    assert broken["status"] == "FINISHED"
    assert broken["equivalent"] == "false"
    assert broken["metrics"]["loss_rel_err_vs_single"] > TOLERANCE["fp32"]
    sound = grid_sweep.outcome("ddp")
    assert sound["equivalent"] == "true"
    assert sound["metrics"]["loss_first_single"] == broken["metrics"]["loss_first_single"]
