"""Prediction error bars through real runs: the shared grid sweep's `single` job is the first
run of its key (in a copy of its store), a run.py job of the same key with another signature
logs that run's error as its prior, and `distbench plan` shows the error bar of both.

pytest tests/e2e/test_pred_priors.py -m e2e
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.e2e.test_sweep import FEW_STEPS, run_py, runs_of

pytestmark = pytest.mark.e2e

JOB = ["strategy=single", "world_size=1", "hardware=cpu", *FEW_STEPS]


def test_each_run_logs_the_prior_error_and_the_plan_shows_the_bar(grid_sweep, tmp_path):
    grid_sweep.copy_store(tmp_path)  # run_py's store: the grid's runs, `single` among them
    # another signature of the same (model, strategy, hardware, precision): 3 timed steps
    proc = run_py([*JOB, "workload.num_steps=3"], tmp_path, timeout_s=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = runs_of(tmp_path).set_index("run_id")
    first = runs.loc[grid_sweep.outcome("single", 1)["run_id"]]
    grid = {grid_sweep.parent_run_id, *grid_sweep.child_run_ids}
    (second,) = [row for run_id, row in runs.iterrows() if run_id not in grid]
    assert first["tags.hardware"] == second["tags.hardware"] == "cpu"
    assert pd.isna(first["metrics.time_pred_rel_err_prior"])  # no run before the first
    assert second["metrics.time_pred_rel_err_prior"] == pytest.approx(
        first["metrics.time_pred_rel_err"]
    )
    assert second["metrics.mem_pred_rel_err_prior"] == pytest.approx(
        first["metrics.mem_pred_rel_err"]
    )
    assert second["metrics.time_pred_prior_num_runs"] == 1
    calibrated = second["metrics.pred_step_time_s"] / (1 + first["metrics.time_pred_rel_err"])
    assert second["metrics.pred_step_time_s_calibrated"] == pytest.approx(calibrated)
    assert not pd.isna(second["metrics.time_pred_calibrated_rel_err"])

    plan = subprocess.run(
        [sys.executable, "-m", "distbench.cli", "plan", *JOB[:3], "model=tiny", "--json"],
        env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plan.returncode == 0, plan.stderr[-3000:]
    (single, final) = json.loads(plan.stdout)
    assert single["pred_error"]["time"]["num_runs"] == 2
    assert "2 finished runs" in final["history"]
