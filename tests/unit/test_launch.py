"""Worker command lines, failure classification, and that no process outlives its job."""

from __future__ import annotations

import sys
import time

import psutil
import pytest

from distbench.launch.workers import (
    classify_failure,
    free_port,
    remove_shm_leftovers,
    run_workers,
    worker_command,
)

pytestmark = pytest.mark.unit


def test_worker_command_runs_torchrun_on_the_worker_module():
    cmd = worker_command("/tmp/job", 4, 29555)
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    assert "--nproc_per_node=4" in cmd and "--master_port=29555" in cmd
    assert cmd[-3:] == ["-m", "distbench.ranks.worker", "/tmp/job"]


def test_free_ports_differ_between_jobs():
    assert len({free_port() for _ in range(5)}) > 1


def test_python_oom_error_file_is_oom():
    errors = [{"rank": 1, "type": "OutOfMemoryError", "message": "CUDA out of memory. Tried..."}]
    kind, reason = classify_failure(1, errors, "")
    assert kind == "oom" and reason.startswith("rank 1: OutOfMemoryError")


def test_cpu_allocator_failure_is_oom():
    errors = [
        {
            "rank": 0,
            "type": "RuntimeError",
            "message": "DefaultCPUAllocator: can't "
            "allocate memory: you tried to allocate 8589934592 bytes.",
        }
    ]
    assert classify_failure(1, errors, "")[0] == "oom"


KILLED_RANK_1 = (
    "Failures:\n[1]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : -15 (pid: 2)\n"
    "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n"
    "  exitcode  : -9 (pid: 77)\n"
)
PEER_GONE = [
    {
        "rank": 0,
        "type": "DistBackendError",
        "message": "[../gloo/transport/tcp/pair.cc:534] Connection closed by peer",
    }
]


def test_sigkill_is_a_crash_naming_the_rank_not_its_peers_collective_error():
    assert classify_failure(1, PEER_GONE, KILLED_RANK_1) == ("crash", "rank 1 killed by SIGKILL")


def test_sigkill_with_the_kernel_oom_counter_moving_is_oom():
    kind, reason = classify_failure(1, PEER_GONE, KILLED_RANK_1, oom_killed=True)
    assert kind == "oom" and reason.startswith("rank 1 killed by SIGKILL")


def test_other_signal_is_crash_with_its_name():
    tail = "Failures:\nRoot Cause\n  rank : 0\n  exitcode : -11 (pid: 5)"
    assert classify_failure(1, [], tail) == ("crash", "rank 0 killed by SIGSEGV")


def test_python_exception_is_crash_with_rank_and_type():
    errors = [{"rank": 1, "type": "ValueError", "message": "bad shape\nmore"}, *PEER_GONE]
    assert classify_failure(1, errors, "") == ("crash", "rank 1: ValueError: bad shape")


def test_a_broken_collective_alone_is_a_collective_error():
    assert classify_failure(1, PEER_GONE, "")[0] == "collective_error"
    nccl = [{"rank": 2, "type": "DistBackendError", "message": "NCCL error: unhandled system"}]
    assert classify_failure(1, nccl, "")[0] == "nccl_error"


def test_wall_clock_timeout(tmp_path):
    script = "import time; time.sleep(600)"
    outcome = run_workers(tmp_path, [sys.executable, "-c", script], {}, timeout_s=2)
    assert outcome.failure_kind == "timeout" and "limits.timeout_s=2" in outcome.failure_reason


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
    assert classify_failure(1, [], tail) == ("crash", "rank 0 killed by SIGABRT")


def test_shm_leftovers_of_the_job_port_are_removed_and_no_others(tmp_path):
    ours = [tmp_path / f"deepspeed_allreduce_buffer_0_127.0.0.1_41000_{r}" for r in range(2)]
    other = tmp_path / "deepspeed_allreduce_buffer_0_127.0.0.1_41001_0"
    for path in (*ours, other):
        path.write_bytes(b"x")
    assert sorted(remove_shm_leftovers(41000, shm_dir=tmp_path)) == ours
    assert [p.name for p in tmp_path.iterdir()] == [other.name]


def test_a_rank_exiting_without_an_error_file_is_named():
    tail = (
        "Failures:\n  <NO_OTHER_FAILURES>\nRoot Cause\n[0]:\n  rank      : 3 (local_rank: 3)\n"
        "  exitcode  : 1 (pid: 9)\n  error_file: <N/A>\n======================"
    )
    kind, reason = classify_failure(1, [], tail)
    assert kind == "crash" and reason.startswith("rank 3 exited with code 1")
