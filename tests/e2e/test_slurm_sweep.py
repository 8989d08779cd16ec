"""`hydra/launcher=slurm` on a real one-node SLURM cluster (tests/infra/slurm_cluster.py): the
sweep goes through sbatch as one job array, each job's orchestrator starts its ranks with srun +
torchrun, the runs land in MLflow under one parent, and a job cancelled with scancel while its
ranks run is a FAILED run (failure_kind=cancelled) while the sweep goes on. Skipped with a
reason without SLURM.

    pytest tests/e2e/test_slurm_sweep.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from tests.conftest import PROJECT_DIR
from tests.e2e.test_sweep import FEW_STEPS, run_py, runs_of
from tests.infra.slurm_cluster import PARTITION, slurm_cluster  # noqa: F401

pytestmark = pytest.mark.e2e

SLURM = ["hydra/launcher=slurm", f"hydra.launcher.partition={PARTITION}"]


def test_a_sweep_runs_through_sbatch_and_srun_into_one_parent(slurm_cluster, tmp_path):  # noqa: F811
    proc = run_py(
        ["-m", *SLURM, "strategy=dp,zero3", "world_size=2", *FEW_STEPS], tmp_path, timeout_s=900
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    runs = runs_of(tmp_path)
    children = runs[runs["tags.mlflow.parentRunId"].notna()]
    assert sorted(children["tags.strategy"]) == ["dp", "zero3"]
    assert (children["status"] == "FINISHED").all(), children.get("tags.failure_reason")
    assert children["tags.mlflow.parentRunId"].nunique() == 1
    assert set(children["tags.rank_launcher"]) == {"srun"}
    assert children["tags.slurm_job_id"].str.match(r"^\d+_[01]$").all()
    assert (children["tags.equivalent"] == "true").all()


def wait_until_ranks_run(tmp_path, timeout_s: float = 300) -> None:
    """Until the second job (5000 steps) has started its ranks: its timed steps are logged."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any("timed" in p.read_text() for p in tmp_path.glob("multirun/*/*/1/progress.jsonl")):
            return
        time.sleep(1)
    raise AssertionError("the long job never started its timed steps")


def test_a_cancelled_job_is_a_failed_run_and_the_sweep_goes_on(slurm_cluster, tmp_path):  # noqa: F811
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db")
    args = ["-m", *SLURM, "strategy=dp", "world_size=2", "model=tiny"]
    args += ["workload.num_warmup_steps=1", "workload.num_steps=2,5000"]
    proc = subprocess.Popen(
        [sys.executable, str(PROJECT_DIR / "run.py"), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            found = re.search(r"job 2/2 is SLURM job (\S+)", line)
            if found:
                wait_until_ranks_run(tmp_path)
                subprocess.run(["scancel", found.group(1)], check=True)
                break
        out, _ = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, "".join(seen)[-2000:] + (out or "")[-3000:]
    runs = runs_of(tmp_path)
    children = runs[runs["tags.mlflow.parentRunId"].notna()].set_index("params.workload.num_steps")
    assert children.loc["2", "status"] == "FINISHED"
    cancelled = children.loc["5000"]
    assert cancelled["status"] == "FAILED"
    assert cancelled["tags.failure_kind"] == "cancelled", cancelled["tags.failure_reason"]
    assert "CANCELLED" in cancelled["tags.failure_reason"]
    parent = runs[runs["tags.mlflow.parentRunId"].isna()].iloc[0]
    assert parent["status"] == "FINISHED" and parent["tags.num_failed"] == "1"
