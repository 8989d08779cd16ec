"""`distbench ui` serves the MLflow UI for the configured store on 127.0.0.1 and prints the URL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from distbench.launch.workers import free_port
from distbench.tracking.mlflow_store import ensure_experiment

pytestmark = pytest.mark.e2e


def test_ui_serves_the_store_on_loopback(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    experiment_id = ensure_experiment(uri, "distbench")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "distbench.cli", "ui", "--port", str(port)],
        env=dict(os.environ, MLFLOW_TRACKING_URI=uri),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        first_line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/#/experiments/{experiment_id}/runs" in first_line
        deadline, status = time.monotonic() + 150, None
        while time.monotonic() < deadline and status != 200:
            try:
                status = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).status
            except OSError:
                time.sleep(1)
        assert status == 200
        # bound to loopback only: another address of this host must not answer
        listening = subprocess.run(["ss", "-ltn"], capture_output=True, text=True).stdout
        assert f"127.0.0.1:{port}" in listening and f"0.0.0.0:{port}" not in listening
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
