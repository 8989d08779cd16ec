"""`distbench ui` for real: the MLflow UI for the configured store on 127.0.0.1, its URL printed
only once /health answers, a handful of processes (one worker, no job runners), stopped cleanly
by SIGTERM with nothing left behind.

    pytest tests/e2e/test_ui.py -m e2e
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from distbench.launch.workers import free_port
from distbench.tracking.mlflow_store import ensure_experiment

pytestmark = pytest.mark.e2e

MAX_PROCESSES = 4  # distbench ui, mlflow ui, its one uvicorn worker (+1 spare)
MAX_RSS_GIB = 1.5  # mlflow's defaults took 3.1 GiB in 15 processes


def tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


@pytest.mark.usefixtures("sqlite_store")  # a copy of the empty store: no migrations
def test_ui_prints_its_url_once_it_answers_and_stops_cleanly(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    experiment_id = ensure_experiment(uri, "distbench")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "distbench.cli", "ui", "--port", str(port)],
        env=dict(os.environ, MLFLOW_TRACKING_URI=uri),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen: list[str] = []
    processes: list[psutil.Process] = []
    try:
        url = f"http://127.0.0.1:{port}/#/experiments/{experiment_id}/runs"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"distbench ui exited ({proc.poll()}): {''.join(seen)[-2000:]}"
            seen.append(line)
            if url in line:
                break
        assert url in seen[-1] and "ready" in seen[-1], "".join(seen)[-2000:]
        # the moment the URL is printed, the server answers: one request, no retry
        health = urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=60)
        assert health.status == 200
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30).status == 200
        assert not any(url in line for line in seen[:-1])  # no URL before it is up
        hint = proc.stdout.readline()
        assert '"Model training"' in hint, hint

        processes += tree(proc.pid)
        rss_gib = sum(p.memory_info().rss for p in processes) / 2**30
        assert len(processes) <= MAX_PROCESSES, [p.cmdline()[:4] for p in processes]
        assert rss_gib < MAX_RSS_GIB, rss_gib
        # bound to loopback only: another address of this host must not answer
        listening = subprocess.run(["ss", "-ltn"], capture_output=True, text=True).stdout
        assert f"127.0.0.1:{port}" in listening and f"0.0.0.0:{port}" not in listening

        proc.send_signal(signal.SIGTERM)  # as a user's Ctrl-C / a service manager stops it
        assert proc.wait(timeout=60) == 0
        assert "distbench: ui stopped (SIGTERM)" in proc.stdout.read()
        _, alive = psutil.wait_procs(processes, timeout=30)
        assert not alive, [p.pid for p in alive]
    finally:  # on a failure: what this test started, the server (its own group) included
        for p in [*processes, *(tree(proc.pid) if proc.poll() is None else [])]:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        proc.wait(timeout=30)
