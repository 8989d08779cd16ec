"""Real sweeps through run.py into a real sqlite MLflow store, read back with mlflow itself: the
README's sweep (the session's shared one, tests/e2e/shared_sweeps.py), and a single invalid run.

pytest tests/e2e -m e2e
"""

from __future__ import annotations

import os
import subprocess
import sys

import mlflow
import pytest

from tests.conftest import PROJECT_DIR
from tests.e2e.shared_sweeps import FEW_STEPS

pytestmark = pytest.mark.e2e

__all__ = ["FEW_STEPS", "run_py", "runs_in", "runs_of", "sync_py"]  # the other modules' helpers
METRICS = [
    "step_time_s_mean",
    "step_time_s_p50",
    "step_time_s_p90",
    "throughput_tokens_per_s",
    "tflops_per_device",
    "tflops_total",
    "mfu_pct",
    "peak_mem_gib",
    "peak_mem_gib_rank0",
    "peak_mem_gib_rank1",
    "cost_usd_per_1m_tokens",
    "loss_first",
    "loss_last",
    "pred_peak_mem_gib",
    "pred_step_time_s",
    "pred_comm_bytes_per_step",
]
TAGS = [
    "strategy",
    "world_size",
    "model",
    "zero_stage",
    "batch",
    "workload",
    "hardware",
    "git_sha",
    "torch_version",
    "deepspeed_version",
    "transformers_version",
]


def run_py(
    args: list[str], tmp_path, timeout_s: float = 1200, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db", **(env or {})}
    return subprocess.run(
        [sys.executable, str(PROJECT_DIR / "run.py"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def sync_py(sweep_dir, tmp_path) -> subprocess.CompletedProcess:
    """`distbench sync SWEEP_DIR` into tmp_path's store, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "distbench.cli", "sync", str(sweep_dir)],
        env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def runs_of(tmp_path):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    try:
        return mlflow.search_runs(experiment_names=["distbench"])
    finally:
        mlflow.set_tracking_uri(None)


def runs_in(uri: str):
    """The experiment's runs as MLflow's pandas frame, from any store."""
    mlflow.set_tracking_uri(uri)
    try:
        return mlflow.search_runs(experiment_names=["distbench"])
    finally:
        mlflow.set_tracking_uri(None)


def test_the_readme_sweep_lands_one_parent_and_six_finished_children(readme_sweep):
    runs = runs_in(readme_sweep.tracking_uri)
    parents = runs[runs["tags.mlflow.parentRunId"].isna()]
    children = runs[runs["tags.mlflow.parentRunId"].notna()]
    assert len(parents) == 1 and parents.iloc[0]["status"] == "FINISHED"
    assert len(children) == 6
    assert set(children["tags.mlflow.parentRunId"]) == {parents.iloc[0]["run_id"]}
    assert list(children["status"].unique()) == ["FINISHED"]
    grid = set(zip(children["tags.strategy"], children["tags.world_size"], strict=True))
    assert grid == {(s, w) for s in ("dp", "tp", "zero3") for w in ("2", "4")}
    for metric in METRICS:
        assert children[f"metrics.{metric}"].notna().all(), metric
        assert (children[f"metrics.{metric}"] > 0).all(), metric
    for tag in TAGS:
        assert children[f"tags.{tag}"].notna().all(), tag
    four = children[children["tags.world_size"] == "4"]
    assert four["metrics.peak_mem_gib_rank3"].notna().all()
    assert set(children["tags.zero_stage"]) == {"0", "3"}
    # every layout computes the single-device model's first-step loss (fp32 tolerance 1e-4)
    assert (children["tags.equivalent"] == "true").all()
    assert (children["metrics.loss_rel_err_vs_single"] < 1e-4).all()
    assert (children["params.strategy.name"] == children["tags.strategy"]).all()
    client = mlflow.MlflowClient(readme_sweep.tracking_uri)
    artifacts = {a.path for a in client.list_artifacts(children.iloc[0]["run_id"])}
    assert {"resolved.yaml", "result.json", "workers.stderr.log"} <= artifacts
    assert "#/experiments/" in readme_sweep.stdout and "/runs" in readme_sweep.stdout
    assert "job 6/6" in readme_sweep.stdout


# An impossible job inside a sweep (a FAILED invalid_config run, and the sweep goes on) is the
# first sweep of tests/e2e/test_survive.py's resume test.


def test_a_single_invalid_run_exits_nonzero_with_one_line_and_no_traceback(tmp_path):
    proc = run_py(["strategy=tp", "world_size=3", "model=tiny"], tmp_path, timeout_s=120)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.strip().splitlines() == [
        "distbench: invalid config: world_size(3) is not divisible by tp(2) * pp(1); "
        "use a world_size that is a multiple of 2"
    ]
    assert not (tmp_path / "mlflow.db").exists()  # nothing was started
    assert not list(tmp_path.rglob("workers.stdout.log"))  # refused before any rank launched
