"""A workload added as one folder outside distbench (tests/e2e/toy_workload/) runs through
run.py for real: its Hydra option, its checks, its rank code on real gloo ranks, its metrics
and tags in a real MLflow store, read back with MLflow's client.

pytest tests/e2e/test_plugin_workload.py
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import PROJECT_DIR
from tests.e2e.test_sweep import run_py, runs_of

pytestmark = pytest.mark.e2e


def run_toy(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    pythonpath = os.pathsep.join([str(PROJECT_DIR), os.environ.get("PYTHONPATH", "")])
    plugin = {"DISTBENCH_PLUGINS": "tests.e2e.toy_workload", "PYTHONPATH": pythonpath}
    return run_py(args, tmp_path, timeout_s=600, env=plugin)


def test_a_workload_defined_outside_the_package_runs_and_is_tracked(tmp_path):
    proc = run_toy(
        ["-m", "workload=toy", "world_size=2", "workload.scale=3", f"hydra.sweep.dir={tmp_path}/s"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = runs_of(tmp_path)
    child = runs.dropna(subset=["tags.mlflow.parentRunId"]).iloc[0]
    assert child["status"] == "FINISHED"
    assert child["metrics.toy_sum"] == child["metrics.toy_expected_sum"] == 3 * (1 + 2)
    assert child["tags.toy_sums_agree"] == "true"
    assert child["tags.workload"] == child["tags.strategy"] == "toy"
    assert child["tags.engine"] == "torch.distributed"
    assert child["params.workload.scale"] == "3"
    # Only the active workload's node is logged: no other workload's keys, no model.
    assert not [c for c in runs.columns if c.startswith(("params.gemm.", "params.model."))]


def test_a_plugin_refuses_its_bad_option_in_one_line_before_launch(tmp_path):
    proc = run_toy(["workload=toy", "workload.scale=0", "tracking=none"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "distbench: invalid config: workload.scale=0 must be >= 1"
    )
