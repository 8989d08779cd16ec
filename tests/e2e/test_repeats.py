"""repeats=2 through `python run.py -m` into a real sqlite store: two child runs of the one
config (tags repeat=1, 2; one signature), the last with the spread across them; every run with
its host's load, the headline metrics also under `headline/`, no measured prediction inputs as
params; the sweep's shared view on the experiment and its training-view URL printed; a
report's tables through log_table on its parent. The README sweep (shared) shows the same
headline copies on every finished run.

    pytest tests/e2e/test_repeats.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from distbench.tracking.dashboard import log_tables
from tests.conftest import PROJECT_DIR

pytestmark = pytest.mark.e2e

# One rank, one step, no warm-up: the cheapest training job (~10 s a repeat here). batch=small,
# as the grid sweep's `single` job: the single-device reference loss of that shape is cached by
# then (a new shape computes its own, ~10 s).
TINY_REPEATS = [
    "strategy=single",
    "world_size=1",
    "model=tiny",
    "workload.num_warmup_steps=0",
    "workload.num_steps=1",
    "tracking.system_metrics_interval_s=0",
    "repeats=2",
]
HEADLINE = ("step_time_s_p50", "throughput_tokens_per_s", "peak_mem_gib")


def run_sweep_into(tmp_path, uri: str, args: list[str]) -> subprocess.CompletedProcess:
    """`python run.py -m <args>` from tmp_path into the store at `uri`; asserts it exits 0."""
    proc = subprocess.run(
        [sys.executable, str(PROJECT_DIR / "run.py"), "-m", *args],
        cwd=tmp_path,
        env=dict(os.environ, MLFLOW_TRACKING_URI=uri),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.usefixtures("sqlite_store")  # a copy of the empty store: no migrations
def test_two_repeats_are_two_runs_of_one_config_and_their_spread(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    proc = run_sweep_into(tmp_path, uri, TINY_REPEATS)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("distbench")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = {r.data.tags["repeat"]: r for r in runs if r.info.run_id != parent.info.run_id}
    assert sorted(children) == ["1", "2"] and all(r.info.status == "FINISHED" for r in runs)
    assert len({r.data.tags["distbench.signature"] for r in children.values()}) == 1
    assert {r.info.run_name.rsplit(" ", 1)[-1] for r in children.values()} == {
        "repeat=1",
        "repeat=2",
    }

    last, first = children["2"].data.metrics, children["1"].data.metrics
    assert last["num_repeats_finished"] == 2 and "num_repeats_finished" not in first
    values = [first["step_time_s_p50"], last["step_time_s_p50"]]
    spread = 100 * (max(values) - min(values)) / (sum(values) / 2)
    assert last["step_time_s_p50_repeat_spread_pct"] == pytest.approx(spread)
    assert f"2 repeats finished, step_time_s_p50 {min(values):.4g}" in proc.stdout

    for child in children.values():
        metrics, params = child.data.metrics, child.data.params
        assert all(metrics[f"headline/{m}"] == metrics[m] for m in HEADLINE)
        assert metrics["host_cores"] >= 1 and "host_load_1m_start" in metrics
        assert "host_load_1m_end" in metrics and "host_busy_pct" in metrics
        assert not [p for p in params if p.startswith("measured.") and not p.endswith("_error")]
        assert params["hardware.time_source"] in ("measured", "efficiency")

    job_dir = tmp_path / "multirun"
    (top,) = job_dir.glob("*/*/0/outcome.json")  # the last repeat's: the job's outcome
    (earlier,) = job_dir.glob("*/*/0/repeat-1/outcome.json")
    assert json.loads(top.read_text())["repeat"] == "2"
    assert json.loads(earlier.read_text())["repeat"] == "1"

    key = f"distbench-{parent.info.run_id[:12]}"
    view = json.loads(experiment.tags[f"mlflow.sharedViewState.{key}"])
    assert json.loads(view["state"])["searchFilter"].endswith(f"'{parent.info.run_id}'")
    assert f"runs?workflowType=machine_learning&viewStateShareKey={key}" in proc.stdout
    report_tables_are_mlflow_tables(uri, parent.info.run_id, tmp_path)


def report_tables_are_mlflow_tables(uri: str, run_id: str, tmp_path) -> None:
    """A report's tables through log_table on a sweep's parent: logged again, replaced (not
    appended, as log_table alone does), and listed as tables MLflow renders."""
    best = pd.DataFrame({"strategy": ["dp", "zero3"], "step_time_s_p50": [0.3, 0.4]})
    for _ in range(2):
        logged = log_tables(uri, run_id, {"best": best, "failed": pd.DataFrame()})
    assert logged == ["report/tables/best.json"]
    client = MlflowClient(uri)
    path = client.download_artifacts(run_id, "report/tables/best.json", str(tmp_path))
    table = json.loads(Path(path).read_text())
    assert table["columns"] == ["strategy", "step_time_s_p50"] and len(table["data"]) == 2
    artifacts = json.loads(client.get_run(run_id).data.tags["mlflow.loggedArtifacts"])
    assert {"path": "report/tables/best.json", "type": "table"} in artifacts


def test_the_readme_sweeps_runs_carry_the_headline_metrics(readme_sweep):
    for child in readme_sweep.children:
        metrics = child.data.metrics
        if child.info.status == "FINISHED":
            assert all(metrics[f"headline/{m}"] == metrics[m] for m in HEADLINE), child
    assert "workflowType=machine_learning&viewStateShareKey=" in readme_sweep.stdout
