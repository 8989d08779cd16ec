"""`distbench compare` against a real sqlite MLflow store: an injected regression is flagged
(exit 1), an unchanged rerun passes (exit 0), bad input exits 2 in one line, the comparison is
logged as a run tagged distbench.kind=compare; and a real sweep compared with a real rerun of
one of its configurations passes.

The injected sweeps are logged with MLflow's own client (compare only reads runs, so controlled
metric values are the honest way to inject a regression); the real pair is the session's shared
README sweep (in a copy of its store) and a 1-job sweep of its dp config through run.py, and
relies on the noise rule not to flag run-to-run jitter.

    pytest tests/e2e/test_compare.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from distbench.tracking.mlflow_store import ensure_experiment
from tests.conftest import PROJECT_DIR

pytestmark = pytest.mark.e2e

# run name, signature, metrics of the baseline sweep
BASELINE = {
    "dp-ws2": ("sigdp0000000001", {"throughput_tokens_per_s": 3200.0, "peak_mem_gib": 0.73}),
    "zero3-ws2": ("sigz30000000001", {"throughput_tokens_per_s": 2100.0, "peak_mem_gib": 0.61}),
}
STEP_TIMES = {"step_time_s_p50": 0.30, "step_time_s_p90": 0.31}  # a quiet run: 3 % spread


@dataclass(frozen=True)
class Store:
    root: Path
    uri: str
    baseline: str
    rerun: str
    regressed: str

    def env(self) -> dict[str, str]:
        return dict(os.environ, MLFLOW_TRACKING_URI=self.uri)


def log_sweep(client, experiment_id, name, start_ms, scale=None) -> str:
    """A FINISHED parent run with one FINISHED child per BASELINE config; `scale` multiplies
    one config's metrics ({run name: {metric: factor}})."""
    tags = {"overrides": "strategy=dp,zero3 world_size=2"}
    parent = client.create_run(experiment_id, start_time=start_ms, tags=tags, run_name=name)
    parent_id = parent.info.run_id
    for i, (run_name, (signature, metrics)) in enumerate(BASELINE.items()):
        factors = (scale or {}).get(run_name, {})
        values = {k: v * factors.get(k, 1.0) for k, v in {**metrics, **STEP_TIMES}.items()}
        child = client.create_run(
            experiment_id,
            start_time=start_ms + i + 1,
            run_name=run_name,
            tags={
                "mlflow.parentRunId": parent_id,
                "distbench.signature": signature,
                "strategy": run_name.split("-")[0],
                "world_size": "2",
                "hw.cpu_model": "test cpu",
            },
        )
        for key, value in values.items():
            client.log_metric(child.info.run_id, key, value)
        client.set_terminated(child.info.run_id, "FINISHED")
    client.set_terminated(parent_id, "FINISHED")
    return parent_id


@pytest.fixture(scope="module")
def store(tmp_path_factory, store_template) -> Store:
    root = tmp_path_factory.mktemp("compare")
    shutil.copy(store_template, root / "mlflow.db")  # a copy of the empty store: no migrations
    uri = f"sqlite:///{root}/mlflow.db"
    experiment_id = ensure_experiment(uri, "distbench")
    client = MlflowClient(uri)
    t0 = 1_790_000_000_000
    baseline = log_sweep(client, experiment_id, "sweep-baseline", t0)
    rerun = log_sweep(  # jitter well inside the threshold
        client,
        experiment_id,
        "sweep-rerun",
        t0 + 60_000,
        {"dp-ws2": {"throughput_tokens_per_s": 0.98}, "zero3-ws2": {"peak_mem_gib": 1.01}},
    )
    regressed = log_sweep(  # zero3 lost 25 % of its throughput: the injected regression
        client,
        experiment_id,
        "sweep-regressed",
        t0 + 120_000,
        {"zero3-ws2": {"throughput_tokens_per_s": 0.75}},
    )
    return Store(root, uri, baseline, rerun, regressed)


def distbench(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "distbench.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def compare_here(store: Store, capsys, monkeypatch, *args: str) -> tuple[int, str, str]:
    """`distbench compare <args>` through the CLI's main() in this process, on the store: its
    exit code, stdout and stderr. For the refusals, which read only their arguments and the
    store: a process each would cost its imports (mlflow, ~4 s a call here); the exit codes of
    a real `distbench compare` process are the other tests'."""
    from distbench.cli import main

    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.uri)
    monkeypatch.chdir(store.root)
    capsys.readouterr()
    try:
        code = main(["compare", *args])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_an_injected_regression_is_flagged_and_logged(store):
    # one run a side: a 25 % drop is judged once the single-run bound is below it
    args = ("--baseline", store.baseline, "--single-run-noise-pct", "10")
    proc = distbench(store.env(), store.root, "compare", *args)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert "REGRESSION in 1 of 2 configuration(s): zero3-ws2" in proc.stdout
    assert store.regressed in proc.stdout  # `latest` is the newest sweep
    assert "-25.0" in proc.stdout

    client = MlflowClient(store.uri)
    experiment_id = client.get_experiment_by_name("distbench").experiment_id
    logged = client.search_runs([experiment_id], "tags.`distbench.kind` = 'compare'")
    assert len(logged) == 1
    run = logged[0]
    assert run.info.status == "FINISHED"
    assert run.data.metrics["num_regressions"] == 1.0
    assert run.data.metrics["num_configs_regressed"] == 1.0
    assert run.data.metrics["num_configs_compared"] == 2.0
    assert run.data.params["baseline_run_id"] == store.baseline
    assert run.data.params["candidate_run_id"] == store.regressed
    assert run.data.params["threshold_pct"] == "5"
    assert run.data.tags["distbench.compare.verdict"] == "regression"
    assert run.info.run_id in proc.stdout
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "compare")}
    assert artifacts == {"compare/compare.md", "compare/compare.csv"}
    table = Path(client.download_artifacts(run.info.run_id, "compare/compare.md")).read_text()
    assert "| zero3-ws2 | throughput_tokens_per_s |" in table and "regression" in table
    parent_tags = client.get_run(store.regressed).data.tags
    assert parent_tags["distbench.compare_run_id"] == run.info.run_id
    assert parent_tags["distbench.num_regressions"] == "1"


def test_an_unchanged_rerun_passes(store):
    proc = distbench(
        store.env(),
        store.root,
        "compare",
        "--baseline",
        store.baseline,
        "--candidate",
        store.rerun,
        "--no-log",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "no regression in 2 configuration(s)" in proc.stdout


def test_a_looser_threshold_lets_the_regression_pass(store):
    proc = distbench(
        store.env(),
        store.root,
        "compare",
        "--baseline",
        store.baseline,
        "--candidate",
        store.regressed,
        "--threshold-pct",
        "30",
        "--no-log",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--baseline", "0" * 32], "distbench: compare: no run '{zeros}' in {uri}"),
        (["--baseline", "BASE", "--metrics", "tokens"], "unknown metric 'tokens'; use some of"),
        (["--baseline", "BASE", "--threshold-pct", "-1"], "--threshold-pct -1.0 must be"),
        (["--baseline", "BASE", "--candidate", "BASE"], "is the baseline sweep"),
        (["--baseline", "BASE", "--experiment", "nope"], "no experiment 'nope' in"),
    ],
)
def test_bad_input_exits_2_in_one_line(store, args, message, capsys, monkeypatch):
    args = [store.baseline if a == "BASE" else a for a in args]
    code, out, err = compare_here(store, capsys, monkeypatch, *args, "--no-log")
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert message.format(zeros="0" * 32, uri=store.uri) in lines[0]


def test_a_child_run_is_not_a_sweep(store, capsys, monkeypatch):
    client = MlflowClient(store.uri)
    child = client.search_runs(
        [client.get_run(store.baseline).info.experiment_id],
        f"tags.`mlflow.parentRunId` = '{store.baseline}'",
    )[0]
    args = ("--baseline", child.info.run_id, "--no-log")
    code, _, err = compare_here(store, capsys, monkeypatch, *args)
    assert code == 2
    assert "not a sweep's parent run" in err


def test_a_real_rerun_of_one_config_is_paired_and_not_flagged(readme_sweep, tmp_path):
    uri = readme_sweep.copy_store(tmp_path)
    env = readme_sweep.env(uri)  # its store copy, and its cache: the same measured peak
    args = [a for a in readme_sweep.args if not a.startswith(("strategy=", "world_size="))]
    proc = subprocess.run(
        [
            *(sys.executable, str(PROJECT_DIR / "run.py"), "-m", "strategy=dp", "world_size=2"),
            *(*args, f"hydra.sweep.dir={tmp_path}/rerun"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(uri)
    experiment_id = client.get_experiment_by_name("distbench").experiment_id
    runs = client.search_runs([experiment_id], order_by=["attributes.start_time ASC"])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    rerun = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[1].info.run_id]
    assert parents[0].info.run_id == readme_sweep.parent_run_id and len(rerun) == 1
    dp = readme_sweep.child("dp", 2)
    assert rerun[0].data.tags["distbench.signature"] == dp.data.tags["distbench.signature"]

    # One 2-step run per sweep on a shared 2-core CI machine: run-to-run throughput differs by
    # more than 5 % (CI saw -6.1 % with a 3 % step spread), and `make test` runs two tests at
    # once, so either sweep may have shared the cores with another test's ranks (up to 2x
    # slower). What this test checks is that two real sweeps pair up by signature and reach a
    # verdict, so the threshold covers that machine noise; the 5 % rule itself is tested on
    # fixed samples above. A loaded host made a rerun 5x slower (a throughput drop of 80 %):
    # --single-run-noise-pct 100 leaves any single-run throughput drop unjudged ("cannot
    # judge", exit 0) while peak memory, untimed, is still judged. The README sweep's other
    # configurations are only in the baseline: not compared, not a regression.
    proc = distbench(
        env,
        tmp_path,
        "compare",
        *("--baseline", parents[0].info.run_id),
        *("--threshold-pct", "80", "--single-run-noise-pct", "100"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "no regression in 1 configuration(s)" in proc.stdout
    assert parents[1].info.run_id in proc.stdout  # latest = the rerun
