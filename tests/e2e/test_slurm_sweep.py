"""`hydra/launcher=slurm` on a real one-node SLURM cluster (tests/infra/slurm_cluster.py): one
sweep of two jobs goes through sbatch as one job array; the first job's orchestrator starts its
ranks with srun + torchrun and its run lands FINISHED in MLflow under the sweep's parent, and
the second, cancelled with scancel while its ranks run, is a FAILED run (failure_kind=cancelled)
while the sweep goes on to its summary. Skipped with a reason without SLURM.

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
from tests.e2e.test_sweep import runs_of
from tests.infra.slurm_cluster import PARTITION, slurm_cluster  # noqa: F401

pytestmark = pytest.mark.e2e

SLURM = ["hydra/launcher=slurm", f"hydra.launcher.partition={PARTITION}"]


def wait_until_ranks_run(tmp_path, timeout_s: float = 300) -> None:
    """Until the second job (5000 steps) has started its ranks: its timed steps are logged."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any("timed" in p.read_text() for p in tmp_path.glob("multirun/*/*/1/progress.jsonl")):
            return
        time.sleep(1)
    raise AssertionError("the long job never started its timed steps")


@pytest.mark.usefixtures("sqlite_store")  # a copy of the empty store: no migrations
def test_a_sweep_runs_through_sbatch_and_srun_and_a_cancelled_job_is_a_failed_run(
    slurm_cluster,  # noqa: F811
    tmp_path,
):
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
    assert children["tags.mlflow.parentRunId"].nunique() == 1
    finished = children.loc["2"]
    assert finished["status"] == "FINISHED", finished["tags.failure_reason"]
    assert finished["tags.rank_launcher"] == "srun"
    assert re.fullmatch(r"\d+_0", finished["tags.slurm_job_id"])  # array task 0
    assert finished["tags.equivalent"] == "true"
    cancelled = children.loc["5000"]
    assert cancelled["status"] == "FAILED"
    assert cancelled["tags.failure_kind"] == "cancelled", cancelled["tags.failure_reason"]
    assert "CANCELLED" in cancelled["tags.failure_reason"]
    parent = runs[runs["tags.mlflow.parentRunId"].isna()].iloc[0]
    assert parent["status"] == "FINISHED" and parent["tags.num_failed"] == "1"
