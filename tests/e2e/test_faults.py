"""Real faults injected into real ranks: each job ends with the right failure kind, the sweep
goes on and exits 0, and no worker process outlives its job.

    pytest tests/e2e/test_faults.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import processes_mentioning
from tests.e2e.test_sweep import FEW_STEPS, run_py, runs_of

pytestmark = pytest.mark.e2e


@pytest.mark.usefixtures("sqlite_store")  # a copy of the empty store: no migrations
def test_kill_stall_and_memory_cap_are_recorded_and_the_sweep_goes_on(tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = run_py(
        [
            "-m",
            "fault.kind=kill,stall,alloc",
            "fault.rank=1",
            "fault.at_step=1",
            "fault.alloc_gib=3",
            "limits.max_mem_gib=2.5",
            # well above a slow warm-up step 0 (CI: 11-13 s), which would end kill/alloc as timeout
            "limits.stall_timeout_s=60",
            *FEW_STEPS,
            f"hydra.sweep.dir={sweep_dir}",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Hydra numbers jobs in the order of fault.kind=kill,stall,alloc; each job after a failed
    # one still runs (a fault-free job with these settings is every shared sweep's)
    kill, stall, alloc = (
        json.loads((sweep_dir / str(i) / "outcome.json").read_text()) for i in range(3)
    )
    assert (kill["failure_kind"], kill["failure_reason"]) == ("crash", "rank 1 killed by SIGKILL")
    assert stall["failure_kind"] == "timeout"
    assert stall["failure_reason"].startswith("rank 1 stuck outside any collective, rank 0")
    assert "limits.stall_timeout_s=60" in stall["failure_reason"]
    # the stall limit plus start-up (at most limits.startup_timeout_s), not the 30 min timeout_s
    assert stall["wall_time_s"] < 60 + 600
    assert alloc["failure_kind"] == "oom"
    assert alloc["failure_reason"].startswith("rank 1 resident memory")
    assert "limits.max_mem_gib=2.5" in alloc["failure_reason"]
    assert not processes_mentioning(str(sweep_dir)), "a worker outlived its job"
    # DeepSpeed's CPU all-reduce leaves 66 MB per rank in /dev/shm, killed ranks included
    for job in (kill, stall, alloc):
        assert not list(Path("/dev/shm").glob(f"*_127.0.0.1_{job['master_port']}_*"))
    children = runs_of(tmp_path).dropna(subset=["tags.mlflow.parentRunId"])
    kinds = sorted(children["tags.failure_kind"].dropna())
    assert kinds == ["crash", "oom", "timeout"]
    assert (sweep_dir / "1" / "stderr_tail.txt").exists()
    assert (sweep_dir / "1" / "stack.rank1.txt").read_text().count("faults.py") >= 1
