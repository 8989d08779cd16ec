"""Prediction error bars through real runs: the shared README sweep runs dp on 2 ranks, then dp
on 4 (the same key: model, strategy, zero stage, hardware, precision; another signature), so its
second run logs the first one's prediction errors as its prior; `distbench plan` shows the error
bar of both. No run of its own.

pytest tests/e2e/test_pred_priors.py -m e2e
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.e2e.test_sweep import runs_in

pytestmark = pytest.mark.e2e


def test_each_run_logs_the_prior_error_and_the_plan_shows_the_bar(readme_sweep, tmp_path):
    runs = runs_in(readme_sweep.tracking_uri).set_index("run_id")
    first = runs.loc[readme_sweep.outcome("dp", 2)["run_id"]]
    second = runs.loc[readme_sweep.outcome("dp", 4)["run_id"]]
    assert first["start_time"] < second["start_time"]  # the sweep ran ws 2 first
    assert first["tags.hardware"] == second["tags.hardware"] == "cpu"
    assert first["tags.distbench.signature"] != second["tags.distbench.signature"]
    assert pd.isna(first["metrics.time_pred_rel_err_prior"])  # no run of its key before it
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

    uri = readme_sweep.copy_store(tmp_path)  # plan only reads; a copy all the same
    job = ["strategy=dp", "world_size=2", "hardware=cpu", "model=tiny"]
    plan = subprocess.run(
        [sys.executable, "-m", "distbench.cli", "plan", *job, "--json"],
        env={**os.environ, "MLFLOW_TRACKING_URI": uri},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plan.returncode == 0, plan.stderr[-3000:]
    (dp, final) = json.loads(plan.stdout)
    assert dp["pred_error"]["time"]["num_runs"] == 2
    assert "2 finished runs" in final["history"]
