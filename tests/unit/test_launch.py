"""Worker command lines, failure classification, and that no process outlives its job."""

from __future__ import annotations

import sys
import time

import psutil
import pytest

from distbench.launch import classify_failure, free_port, run_workers, worker_command

pytestmark = pytest.mark.unit


def test_worker_command_runs_torchrun_on_the_worker_module():
    cmd = worker_command("/tmp/job", 4, 29555)
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    assert "--nproc_per_node=4" in cmd and "--master_port=29555" in cmd
    assert cmd[-3:] == ["-m", "distbench.worker", "/tmp/job"]


def test_free_ports_differ_between_jobs():
    assert len({free_port() for _ in range(5)}) > 1


def test_python_oom_error_file_is_oom():
    errors = [{"rank": 1, "type": "OutOfMemoryError", "message": "CUDA out of memory. Tried..."}]
    kind, reason = classify_failure(1, False, 60, errors, "")
    assert kind == "oom" and reason.startswith("rank 1: OutOfMemoryError")


def test_sigkill_without_error_file_is_likely_oom():
    tail = "[0]:\n  time      : 2026\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 77)"
    kind, reason = classify_failure(1, False, 60, [], tail)
    assert kind == "oom" and "rank 1 killed by SIGKILL" in reason


def test_other_signal_is_crash_with_its_name():
    kind, reason = classify_failure(1, False, 60, [], "rank : 0\nexitcode : -11 (pid: 5)")
    assert kind == "crash" and "SIGSEGV" in reason


def test_python_exception_is_crash_with_rank_and_type():
    errors = [{"rank": 0, "type": "ValueError", "message": "bad shape\nmore"}]
    assert classify_failure(1, False, 60, errors, "") == ("crash", "rank 0: ValueError: bad shape")


def test_timeout_wins():
    kind, reason = classify_failure(None, True, 5, [], "")
    assert kind == "timeout" and "limits.timeout_s=5" in reason


def test_timeout_kills_the_whole_process_group(tmp_path):
    # A parent that starts a child which ignores nothing and sleeps: both must be gone.
    script = (
        "import subprocess, sys, time;"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
        f"open(r'{tmp_path}/child.pid', 'w').write(str(p.pid));"
        "time.sleep(600)"
    )
    start = time.monotonic()
    outcome = run_workers(tmp_path, [sys.executable, "-c", script], {}, timeout_s=3)
    assert outcome.failure_kind == "timeout" and not outcome.ok
    assert time.monotonic() - start < 20
    child_pid = int((tmp_path / "child.pid").read_text())
    assert not psutil.pid_exists(child_pid) or psutil.Process(child_pid).status() == "zombie"


def test_crash_reports_exit_code_and_last_stderr_line(tmp_path):
    script = "import sys; print('boom happened', file=sys.stderr); sys.exit(3)"
    outcome = run_workers(tmp_path, [sys.executable, "-c", script], {}, timeout_s=30)
    assert outcome.failure_kind == "crash"
    assert outcome.returncode == 3 and "boom happened" in outcome.failure_reason


def test_root_cause_rank_is_reported_not_the_rank_torchrun_killed():
    tail = (
        "Failures:\n[1]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : -15 (pid: 2)\n"
        "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"
        "  exitcode  : -6 (pid: 1)\n"
    )
    assert classify_failure(1, False, 60, [], tail) == ("crash", "rank 0 killed by signal SIGABRT")
