"""Worker command lines, failure classification, and that no process outlives its job."""

from __future__ import annotations

import os
import signal
import sys

import psutil
import pytest

from distbench.launch.workers import (
    classify_failure,
    clear_attempt_files,
    free_port,
    job_ports,
    remove_shm_leftovers,
    run_workers,
    worker_command,
    worker_env,
)
from tests.conftest import processes_mentioning

pytestmark = pytest.mark.unit


def test_worker_command_runs_torchrun_on_the_worker_module():
    cmd = worker_command("/tmp/job", 4, 29555)
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    assert "--nproc_per_node=4" in cmd and "--master_port=29555" in cmd
    assert cmd[-3:] == ["-m", "distbench.ranks.worker", "/tmp/job"]


def test_the_ranks_build_ops_with_their_python_environments_ninja(monkeypatch):
    bin_dir = os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    path = worker_env("cpu", 2, 2)["PATH"].split(os.pathsep)
    assert path == [bin_dir, "/usr/bin", "/bin"]
    monkeypatch.setenv("PATH", os.pathsep.join(path))  # already first: not added twice
    assert worker_env("cpu", 2, 2)["PATH"].split(os.pathsep) == path


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
        "import os, subprocess, sys, time;"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
        f"open(r'{tmp_path}/child.pid.tmp', 'w').write(str(p.pid));"
        f"os.replace(r'{tmp_path}/child.pid.tmp', r'{tmp_path}/child.pid');"
        "time.sleep(600)"
    )

    # stop the group once the child exists (a fixed short timeout_s could fire first on a
    # loaded host); the kill after a stop is the one a timeout takes
    def child_started(pid: int) -> tuple[str, str] | None:
        return ("timeout", "child started") if (tmp_path / "child.pid").exists() else None

    outcome = run_workers(
        tmp_path, [sys.executable, "-c", script], {}, timeout_s=120, watchdog=child_started
    )
    assert outcome.failure_kind == "timeout" and not outcome.ok
    assert outcome.failure_reason.startswith("child started"), outcome.failure_reason
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


def test_a_rank_aborted_by_its_peers_error_names_the_error():
    """The device audit's job on 2026-11-28: rank 1 raised on a meta tensor and left, gloo
    aborted rank 0 mid-collective; the reason named the abort, not the error."""
    tail = "Failures:\nRoot Cause (first observed failure):\n[0]:\n  rank : 0 (local_rank: 0)\n"
    tail += "  exitcode  : -6 (pid: 1)\n"
    errors = [{"rank": 1, "type": "NotImplementedError", "message": "tensor on meta"}, *PEER_GONE]
    assert classify_failure(1, errors, tail) == (
        "crash",
        "rank 1: NotImplementedError: tensor on meta",
    )
    assert classify_failure(1, PEER_GONE, tail) == ("crash", "rank 0 killed by SIGABRT")


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


def test_an_earlier_attempts_files_are_cleared_and_the_config_kept(tmp_path):
    attempt = [
        "result.json",
        "result.json.tmp",
        "error.rank1.json",
        "error.rank0.json.tmp",
        "stack.rank0.txt",
        "progress.jsonl",
        "workers.stdout.log",
        "workers.stderr.log",
        "stderr_tail.txt",
        "heartbeat/rank0",
        "heartbeat/rank1",
    ]
    kept = ["resolved.yaml", "outcome.json", "mlflow_run.json", "upload/resolved.yaml"]
    for name in attempt + kept:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("{}")
    clear_attempt_files(tmp_path)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == sorted(kept)
    assert not (tmp_path / "heartbeat").exists()


def test_run_workers_never_reads_a_stale_result(tmp_path):
    (tmp_path / "result.json").write_text('{"status": "ok"}')  # an earlier attempt's
    script = "import sys; print('boom', file=sys.stderr); sys.exit(1)"
    outcome = run_workers(tmp_path, [sys.executable, "-c", script], {}, timeout_s=30)
    assert not outcome.ok and outcome.failure_kind == "crash"


def test_job_ports_are_read_from_both_launch_command_lines():
    assert job_ports(worker_command("/tmp/job", 2, 29555)) == [29555]
    assert job_ports(["--rdzv_endpoint=node07:41234", "--nnodes=2"]) == [41234]


def two_rank_torchrun(script, out_dir) -> list[str]:
    """A real torchrun of `script` on 2 ranks, each given `out_dir`."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={free_port()}",
        str(script),
        str(out_dir),
    ]


STOPPING_RANKS = """
import os, pathlib, signal, sys, time
rank = os.environ["RANK"]
pathlib.Path(sys.argv[1], "started.rank" + rank).write_text(str(os.getpid()))
if rank == "1":
    os.kill(os.getpid(), signal.SIGSTOP)  # a hang no signal but SIGKILL ends
time.sleep(600)
"""


def test_a_stopped_rank_in_its_own_session_is_killed_with_the_group(tmp_path):
    # torch's agent starts each rank in a session of its own: killing torchrun's process group
    # misses them, and a stopped rank does not act on the SIGTERM torchrun forwards.
    script = tmp_path / "ranks.py"
    script.write_text(STOPPING_RANKS)
    cmd = two_rank_torchrun(script, tmp_path)

    def both_started_and_one_stopped(pid: int) -> tuple[str, str] | None:
        started = sorted(tmp_path.glob("started.rank*"))
        if len(started) < 2:
            return None
        stopped = psutil.Process(int((tmp_path / "started.rank1").read_text())).status()
        return ("timeout", "rank 1 stopped") if stopped == psutil.STATUS_STOPPED else None

    env = dict(os.environ, OMP_NUM_THREADS="1")
    outcome = run_workers(tmp_path, cmd, env, 120, watchdog=both_started_and_one_stopped)
    assert processes_mentioning(str(script)) == []
    assert outcome.failure_reason == "rank 1 stopped; all ranks killed", outcome.stderr_tail
    assert outcome.survivors == []


SLEEPING_RANKS = """
import os, pathlib, sys, time
pathlib.Path(sys.argv[1], "started.rank" + os.environ["RANK"]).write_text(str(os.getpid()))
time.sleep(600)
"""


def test_a_killed_launcher_is_named_as_the_cause_and_its_ranks_die_with_it(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(SLEEPING_RANKS)
    cmd = two_rank_torchrun(script, tmp_path)

    def kill_torchrun_once_ranks_run(pid: int) -> None:
        if len(list(tmp_path.glob("started.rank*"))) == 2:
            os.kill(pid, signal.SIGKILL)  # as the OOM killer or an admin would

    env = dict(os.environ, OMP_NUM_THREADS="1")
    outcome = run_workers(tmp_path, cmd, env, 120, watchdog=kill_torchrun_once_ranks_run)
    assert not outcome.ok and outcome.returncode == -signal.SIGKILL
    assert outcome.failure_kind == "crash"
    assert outcome.failure_reason.startswith("the launcher (torchrun) was killed by SIGKILL")
    assert processes_mentioning(str(script)) == []


def test_a_launcher_killed_by_the_oom_killer_is_an_oom():
    assert classify_failure(-9, [], "", oom_killed=True)[0] == "oom"
    assert classify_failure(-15, [], "")[1].startswith(
        "the launcher (torchrun) was killed by SIGTERM"
    )
