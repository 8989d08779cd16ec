"""A run whose loss goes non-finite is a FAILED run (failure_kind=diverged), not a FINISHED one
ranked with the healthy runs: its ranks stop at the step the loss went nan, the reason names
that step, the figures measured so far are kept, and no equivalence is claimed.

    pytest tests/unit/test_edges_divergence.py
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from distbench.job import resolve_job
from distbench.workloads.train import workload
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config

TINY = ["model=tiny", "batch.micro_batch_size=1", "batch.seq_len=32"]


def tiny_job(*overrides: str):
    return resolve_job(
        compose_config([*TINY, "world_size=1", "strategy=single", *overrides]), CONF_DIR
    )


def result_of(losses: list[float], num_warmup: int) -> dict:
    """A one-rank result.json body with these losses (0.1 s a step)."""
    rank = {"peak_mem_bytes": 2**30, "init_mem_bytes": 2**29, "init_time_s": 1.0}
    return {
        "num_warmup_steps": num_warmup,
        "step_times_s": [0.1] * len(losses),
        "losses": losses,
        "ranks": [rank],
    }


@pytest.mark.unit
def test_the_first_non_finite_loss_names_the_step():
    assert workload.diverged_step([9.1, 8.7, 8.2]) is None
    assert workload.diverged_step([9.1, float("nan")]) == 2
    assert workload.diverged_step([float("inf"), float("nan")]) == 1


@pytest.mark.unit
def test_a_diverged_result_fails_with_its_figures_and_no_equivalence():
    job = tiny_job("workload.num_warmup_steps=1", "workload.num_steps=3")
    measured = workload.measure(job, result_of([9.0, 8.9, float("nan")], num_warmup=1))
    kind, reason = measured.failure
    assert kind == "diverged" and "step 3/4" in reason and "workload.lr" in reason
    assert measured.tags["diverged_at_step"] == "3" and measured.tags["equivalent"] != "true"
    assert measured.metrics["loss_first"] == 9.0 and math.isnan(measured.metrics["loss_last"])
    assert measured.metrics["step_time_s_p50"] == pytest.approx(0.1)  # the steps that ran
    healthy = workload.measure(job, result_of([9.0, 8.9, 8.8, 8.7], num_warmup=1))
    assert healthy.failure is None and "diverged_at_step" not in healthy.tags


@pytest.mark.unit
def test_a_run_diverged_in_warm_up_has_no_step_time_figures():
    job = tiny_job("workload.num_warmup_steps=3", "workload.num_steps=3")
    measured = workload.measure(job, result_of([9.0, float("nan")], num_warmup=3))
    assert measured.failure[0] == "diverged" and "(warm-up)" in measured.failure[1]
    assert measured.metrics["num_timed_steps"] == 0.0
    assert not set(workload.STEP_TIME_METRICS) & set(measured.metrics)
    assert "peak_mem_gib" in measured.metrics and "init_time_s" in measured.metrics


@pytest.mark.e2e
def test_a_run_with_a_huge_learning_rate_is_a_failed_diverged_run(tmp_path):
    """One rank, five steps asked: Adam's first update moves every weight by ~lr (step 2's loss
    is already that of uniform logits), and step 3's is nan (as workload.lr=1e6 gave in N40)."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = [*TINY, "strategy=single", "world_size=1", "workload.lr=1e6"]
    args += ["workload.num_warmup_steps=0", "workload.num_steps=5", f"hydra.run.dir={tmp_path}/r"]
    proc = subprocess.run(
        [sys.executable, str(PROJECT_DIR / "run.py"), *args],
        cwd=tmp_path,
        env={**os.environ, "MLFLOW_TRACKING_URI": uri},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "failed (diverged): the loss went nan at step 3/5" in proc.stdout
    outcome = json.loads((tmp_path / "r" / "outcome.json").read_text())
    assert outcome["status"] == "FAILED" and outcome["failure_kind"] == "diverged"
    assert outcome["diverged_at_step"] == "3"
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("distbench").experiment_id])
    assert run.info.status == "FAILED"
    assert run.data.tags["failure_kind"] == "diverged" and run.data.tags["diverged_at_step"] == "3"
    assert run.data.tags["equivalent"] != "true"
    metrics = run.data.metrics  # what it measured before it diverged stays
    assert math.isfinite(metrics["loss_first"]) and metrics["step_time_s_p50"] > 0
    progress = (tmp_path / "r" / "progress.jsonl").read_text().splitlines()
    assert len(progress) == 3 and "NaN" in progress[-1]  # stopped at the nan step, not 5
