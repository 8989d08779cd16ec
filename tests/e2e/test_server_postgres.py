"""`distbench server` on a real PostgreSQL: a tiny real sweep logs to it over HTTP
(`tracking=server`), `distbench report` reads it back, and the database password (given only as
$PGPASSWORD) appears in no argv, no printed line and no logged param or tag.

Skipped with the reason when the PostgreSQL binaries are missing (apt-get install -y postgresql).

    pytest tests/e2e/test_server_postgres.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import psycopg2
import pytest
from mlflow.tracking import MlflowClient

from distbench.launch.workers import free_port
from tests.conftest import PROJECT_DIR
from tests.infra.postgres import Postgres, postgres_server  # noqa: F401 (the fixture)

pytestmark = pytest.mark.e2e

SWEEP = ["-m", "strategy=dp", "world_size=2", "model=tiny", "tracking=server"]
SWEEP += ["workload.num_warmup_steps=1", "workload.num_steps=2"]
START_TIMEOUT_S = 240


def wait_for_line(proc: subprocess.Popen, log: Path, text: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = log.read_text()
        if text in out:
            return out
        if proc.poll() is not None:
            raise AssertionError(f"distbench server exited ({proc.returncode}): {out[-3000:]}")
        time.sleep(0.5)
    raise AssertionError(f"no {text!r} within {timeout_s} s: {log.read_text()[-3000:]}")


def cmdlines(pid: int) -> list[str]:
    """The argv of a process and all its descendants, one string each."""
    root = psutil.Process(pid)
    return [" ".join(p.cmdline()) for p in [root, *root.children(recursive=True)]]


def test_a_sweep_logs_to_the_team_server_on_postgres_and_reads_back(
    postgres_server: Postgres,  # noqa: F811
    tmp_path,
):
    pg, password = postgres_server, postgres_server.password
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server_env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    server_env["PGPASSWORD"] = password
    log = tmp_path / "server.out"
    root = tmp_path / "root"
    cmd = [sys.executable, "-m", "distbench.cli", "server", "--backend", pg.uri]
    cmd += ["--root", str(root), "--port", str(port), "--workers", "1"]
    with open(log, "w") as out:
        server = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=server_env, start_new_session=True
        )
    try:
        printed = wait_for_line(server, log, "export MLFLOW_TRACKING_URI=", START_TIMEOUT_S)
        backend = pg.uri.replace("postgresql://", "postgresql+psycopg2://")
        assert f"MLflow tracking server up at {url} (backend {backend}" in printed
        assert "password from $PGPASSWORD" in printed
        assert f"export MLFLOW_TRACKING_URI={url}\n" in printed
        assert all(password not in line for line in cmdlines(server.pid))
        mlflow_server = psutil.Process(server.pid).children()[0]
        assert mlflow_server.environ()["PGPASSWORD"] == password  # its environment only

        sweep_env = dict(os.environ, MLFLOW_TRACKING_URI=url, PGPASSWORD=password)
        sweep = subprocess.run(
            [sys.executable, str(PROJECT_DIR / "run.py"), *SWEEP, f"hydra.sweep.dir={tmp_path}/s"],
            cwd=tmp_path,
            env=sweep_env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert sweep.returncode == 0, sweep.stderr[-3000:]
        assert "distbench sync" not in sweep.stdout  # nothing spooled: the server took it all

        report_cmd = ["report", "--sweep", "latest", "--out", str(tmp_path / "report")]
        report = subprocess.run(
            [sys.executable, "-m", "distbench.cli", *report_cmd],
            cwd=tmp_path,
            env=sweep_env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert report.returncode == 0, report.stderr[-3000:]
        assert "(1 runs)" in report.stdout

        client = MlflowClient(url)
        experiment = client.get_experiment_by_name("distbench")
        runs = client.search_runs([experiment.experiment_id])
        parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
        children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
        assert len(parents) == 1 and len(children) == 1
        child = children[0]
        assert child.info.status == "FINISHED"
        assert child.data.tags["strategy"] == "dp" and child.data.tags["world_size"] == "2"
        assert child.data.metrics["throughput_tokens_per_s"] > 0
        assert child.data.metrics["peak_mem_gib"] > 0
        assert child.data.params["tracking.backend"] == "server"
        # artifacts went over HTTP into the server's artifact destination
        assert "resolved.yaml" in {a.path for a in client.list_artifacts(child.info.run_id)}
        assert list((root / "artifacts").rglob("resolved.yaml"))
        report_files = {a.path for a in client.list_artifacts(parents[0].info.run_id, "report")}
        assert "report/report.md" in report_files

        for run in runs:
            logged = {**run.data.params, **run.data.tags}
            leaks = [k for k, v in logged.items() if password in str(v) or password in k]
            assert not leaks, f"password in {leaks} of run {run.info.run_name}"
        for text in (printed, log.read_text(), sweep.stdout, sweep.stderr, report.stdout):
            assert password not in text

        with psycopg2.connect(pg.uri, password=password) as db, db.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM runs")  # MLflow's own table, in PostgreSQL
            assert cursor.fetchone()[0] == 2
    finally:
        descendants = []
        if server.poll() is None:
            descendants = psutil.Process(server.pid).children(recursive=True)
        server.send_signal(signal.SIGTERM)  # distbench forwards it to the MLflow server
        try:
            code = server.wait(timeout=60)
        finally:
            _, alive = psutil.wait_procs(descendants, timeout=30)
            for process in [*alive, *([server] if server.poll() is None else [])]:
                process.kill()  # only if stopping failed; the assertions below say so
    assert code == 0
    assert "distbench: server stopped (SIGTERM)" in log.read_text()
    assert not alive, f"left running: {[p.pid for p in alive]}"
