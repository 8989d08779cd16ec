"""Processes at the edges, through the real entry points (issue 28, defects 2 and 6): run.py
refuses a sweep into a sweep dir another sweep holds, before any job or MLflow run; a SIGKILLed
`distbench ui` takes its MLflow server (mlflow ui and its uvicorn worker) with it, freeing the
port. (The same rules for probes, the reference, ranks and build locks:
tests/unit/test_process_edges.py.)

    pytest tests/e2e/test_process_edges.py
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from distbench.launch.workers import free_port
from distbench.sweep_lock import LOCK_FILE
from distbench.tools.server import ServerError, check_port_free
from distbench.tracking.mlflow_store import ensure_experiment
from tests.e2e.test_sweep import FEW_STEPS, run_py

pytestmark = pytest.mark.e2e

REFUSAL_S = 60  # run.py's start (compose, the override check) on a loaded 2-core host
UI_START_S = 240
SERVER_GONE_S = 60  # the guard's SIGTERM grace (5 s) and a poll, with room for a loaded host


def test_a_second_sweep_into_a_held_sweep_dir_is_refused_before_any_job(tmp_path):
    sweep_dir = tmp_path / "s"
    holder = subprocess.Popen(  # the first sweep's lock, held as run.py holds it
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, time
                from distbench.sweep_lock import hold_sweep_dir
                hold_sweep_dir(sys.argv[1]); print("held", flush=True); time.sleep(300)
                """
            ),
            str(sweep_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        proc = run_py(
            ["-m", "strategy=dp,zero1", *FEW_STEPS, f"hydra.sweep.dir={sweep_dir}"],
            tmp_path,
            timeout_s=REFUSAL_S,
        )
        took_s = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert lines[0].startswith("distbench: the sweep dir ")
    assert str(sweep_dir.resolve()) in lines[0] and f"pid {holder.pid}" in lines[0]
    assert sorted(p.name for p in sweep_dir.iterdir()) == [LOCK_FILE]  # no job dir, no yaml
    assert not (tmp_path / "mlflow.db").exists()  # no parent run either
    print(f"refused in {took_s:.1f} s")


def tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def alive_after(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Those still running after `timeout_s` (a zombie has exited: only a wait is missing)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = []
        for p in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


@pytest.mark.usefixtures("sqlite_store")  # a copy of the empty store: no migrations
def test_a_sigkilled_ui_takes_its_mlflow_server_with_it(tmp_path):
    """Killed once mlflow ui has forked its uvicorn worker (the process that serves the port
    and that no parent-death signal of ours reaches): before the fix both ran on, orphaned."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    ensure_experiment(uri, "distbench")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "distbench.cli", "ui", "--port", str(port)],
        env=dict(os.environ, MLFLOW_TRACKING_URI=uri),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    processes: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + UI_START_S
        while not any("uvicorn" in " ".join(p.cmdline()) for p in processes):
            assert proc.poll() is None, f"distbench ui exited with {proc.returncode}"
            assert time.monotonic() < deadline, "mlflow ui never started its uvicorn worker"
            time.sleep(0.1)
            with contextlib.suppress(psutil.NoSuchProcess):
                processes = tree(proc.pid)
        assert any("mlflow" in " ".join(p.cmdline()) for p in processes[1:]), processes

        proc.send_signal(signal.SIGKILL)  # the distbench process only: no handler runs
        proc.wait(timeout=30)
        alive = alive_after(processes[1:], SERVER_GONE_S)
        assert not alive, [(p.pid, p.cmdline()[:4]) for p in alive]
        check_port_free("127.0.0.1", port)  # the next `distbench ui` may take the port
    except ServerError as exc:
        pytest.fail(f"the port is still taken after the ui was SIGKILLed: {exc}")
    finally:  # on a failure: what this test started
        for p in [*processes, *(tree(proc.pid) if proc.poll() is None else [])]:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
