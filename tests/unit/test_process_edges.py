"""Processes at the edges of a job, with real processes (issue 28, defects 2-5): one sweep per
sweep dir, the memory watch that sees the ranks and not what they start, torch's build lock
left by a killed build, and the compose-time children (probes, the equivalence reference) that
die with a SIGKILLed orchestrator.

    pytest tests/unit/test_process_edges.py
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from distbench.compose.schema import LimitsConfig
from distbench.job import resolve_job
from distbench.launch.build_locks import clear_stale_locks, describe_locks
from distbench.launch.watchdog import Watchdog, rank_processes
from distbench.launch.workers import run_workers
from distbench.sweep_lock import LOCK_FILE, SweepDirBusy, hold_sweep_dir, release_sweep_dir
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

MIB = 2**20
WAIT_S = 60.0  # a deadline only: a loaded CI host can take many seconds


def wait_for(predicate, what: str, timeout_s: float = WAIT_S):
    """predicate()'s first truthy value, polled; fails naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"{what} not seen within {timeout_s:g} s")


def children_of(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []


def running(process: psutil.Process) -> bool:
    """Whether it runs (a zombie has exited: only its new parent's wait is missing)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextlib.contextmanager
def killed_at_exit(*procs: subprocess.Popen):
    """Whatever these processes (and anything under them) left running is SIGKILLed at the end."""
    seen: dict[int, psutil.Process] = {}
    try:
        yield seen
    finally:
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                seen.update({p.pid: p for p in psutil.Process(proc.pid).children(recursive=True)})
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=10)
        for process in seen.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


def python(code: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], **kwargs)


# --------------------------------------------------------------------------- 2: sweep dir lock


def test_a_second_sweep_into_a_held_sweep_dir_is_refused_naming_the_dir_and_the_holder(tmp_path):
    sweep_dir = tmp_path / "s"
    holder = python(
        """
        import sys, time
        from distbench.sweep_lock import hold_sweep_dir
        hold_sweep_dir(sys.argv[1]); print("held", flush=True); time.sleep(60)
        """,
        str(sweep_dir),
        stdout=subprocess.PIPE,
        text=True,
    )
    with killed_at_exit(holder):
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SweepDirBusy) as busy:
            hold_sweep_dir(sweep_dir)
        message = str(busy.value)
        assert str(sweep_dir.resolve()) in message and f"pid {holder.pid}" in message
        assert "\n" not in message
        holder.send_signal(signal.SIGKILL)  # the kernel drops the lock with its holder
        holder.wait(timeout=10)
    assert hold_sweep_dir(sweep_dir) == sweep_dir.resolve() / LOCK_FILE
    release_sweep_dir(sweep_dir)


# --------------------------------------------------------------------------- 3: memory watch

AGENT = """\
import os, subprocess, sys, time
# as torchrun: start each rank with its RANK
ranks = [
    subprocess.Popen([sys.executable, "-c", sys.argv[1], str(r), sys.argv[2]],
                     env=dict(os.environ, RANK=str(r)))
    for r in (0, 1)
]
time.sleep(60)
"""
RANK = """
import os, subprocess, sys, time
rank, out = int(sys.argv[1]), sys.argv[2]
held = b""
if rank == 0:  # as DeepSpeed's op build: rank 0 runs a compiler, which inherits RANK=0
    compiler = "big = b'x' * (200 << 20); open(sys.argv[1], 'w').write('ok'); time.sleep(60)"
    subprocess.Popen([sys.executable, "-c", "import sys, time; " + compiler, out + ".cc"])
else:  # rank 1 itself goes over the cap (an injected alloc fault)
    held = b"x" * (200 << 20)
open(f"{out}.rank{rank}", "w").write(str(os.getpid()))
time.sleep(60)
"""


def test_the_memory_watch_sees_the_rank_not_the_compiler_it_started(tmp_path):
    """A rank's compiler inherits its RANK; before the fix it replaced the rank: `oom` on
    rank 0 with the compiler's memory, and rank 1's real excess never named."""
    (tmp_path / "bin").mkdir()
    agent_script = tmp_path / "bin" / "torchrun"
    agent_script.write_text(AGENT)
    out = str(tmp_path / "pid")
    agent = subprocess.Popen([sys.executable, str(agent_script), textwrap.dedent(RANK), out])
    with killed_at_exit(agent):
        wait_for(
            lambda: all(Path(f"{out}{s}").exists() for s in (".rank0", ".rank1", ".cc")),
            "two ranks and a compiler",
        )
        rank_pids = {r: int(Path(f"{out}.rank{r}").read_text()) for r in (0, 1)}
        assert {r: p.pid for r, p in rank_processes(agent.pid).items()} == rank_pids
        watchdog = Watchdog(tmp_path, 2, LimitsConfig(max_mem_gib=100 * MIB / 2**30))
        found = watchdog.check_memory(agent.pid)
        assert found is not None and found[0] == "oom"
        assert found[1].startswith("rank 1 resident memory"), found


# --------------------------------------------------------------------------- 4: build locks

WAITER = """
import os, sys, time
lock, job_dir = sys.argv[1], sys.argv[2]
while os.path.exists(lock):  # as torch.utils.file_baton.FileBaton.wait
    time.sleep(0.1)
open(os.path.join(job_dir, "result.json"), "w").write("{}")
"""


def test_a_build_lock_left_by_a_killed_build_is_removed_before_the_ranks_start(tmp_path, capsys):
    """Before the fix the rank waited on the lock until the job's time ran out."""
    lock = tmp_path / "ext" / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()  # what a build killed mid-way leaves: the file, no process
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    cmd = [sys.executable, "-c", WAITER, str(lock), str(job_dir)]
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path / "ext"))
    launched = run_workers(job_dir, cmd, env, timeout_s=60)  # a hang still ends as a timeout
    assert launched.ok, launched.failure_reason
    assert not lock.exists()
    assert f"removed the stale build lock {lock}" in capsys.readouterr().out


def test_a_held_build_lock_is_kept_and_a_startup_timeout_names_it_and_its_holder(tmp_path):
    ext = tmp_path / "ext"
    lock = ext / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir(parents=True)
    builder = python(  # as FileBaton.try_acquire: the builder keeps the file open while it builds
        """
        import os, sys, time
        fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL); print("built", flush=True)
        time.sleep(60)
        """,
        str(lock),
        stdout=subprocess.PIPE,
        text=True,
    )
    with killed_at_exit(builder):
        assert builder.stdout.readline().strip() == "built"
        assert clear_stale_locks(ext, settle_s=0.2) == [] and lock.exists()
        limits = LimitsConfig(startup_timeout_s=1)
        watchdog = Watchdog(tmp_path, 2, limits, extensions_dir=ext)
        kind, reason = watchdog.check_heartbeats(time.time() + 5)
        assert kind == "timeout" and "did not start within limits.startup_timeout_s=1" in reason
        assert f"the build lock {lock} (held by pid {builder.pid})" in reason
        builder.send_signal(signal.SIGKILL)  # killed mid-build: the file stays
        builder.wait(timeout=10)
    assert lock.exists() and "no process holds it" in describe_locks(ext)
    assert clear_stale_locks(ext, settle_s=0.2) == [lock] and not lock.exists()


# --------------------------------------------------------------------------- 5: probes


def assert_dies_with_its_parent(parent: subprocess.Popen) -> None:
    """SIGKILL `parent` once it has started its child; the child must be gone soon after."""
    with killed_at_exit(parent) as seen:
        child = wait_for(lambda: children_of(parent.pid), "the parent's child")[0]
        seen[child.pid] = child
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        wait_for(lambda: not running(child), f"the end of pid {child.pid}", timeout_s=5)


def test_a_probe_dies_with_a_sigkilled_orchestrator():
    parent = python(
        """
        from distbench.probes.runner import run_probe
        run_probe(["-c", "import time; time.sleep(60)"])
        """
    )
    assert_dies_with_its_parent(parent)


def test_the_equivalence_reference_dies_with_a_sigkilled_orchestrator(tmp_path):
    job = resolve_job(compose_config(["model=tiny"]), CONF_DIR)
    (tmp_path / "resolved.yaml").write_text(job.to_yaml())
    parent = python(
        """
        import sys
        from pathlib import Path
        from distbench.job import Job
        from distbench.workloads.train.equivalence import reference_loss
        reference_loss(Job.load(Path(sys.argv[1])), Path(sys.argv[1]))
        """,
        str(tmp_path),
        env=dict(os.environ, DISTBENCH_CACHE_DIR=str(tmp_path / "cache"), HOME=str(tmp_path)),
    )
    assert_dies_with_its_parent(parent)
