"""Worker processes that die with the process that started them (Linux's parent-death signal).

The worker group runs in its own session and torch's elastic agent starts every rank in a
session of its own, so nothing reaches them when the orchestrator is SIGKILLed (an OOM kill,
`kill -9`, a lost CI runner): without this they would train on, holding cores, memory and
/dev/shm. Each link of the chain is armed with prctl(PR_SET_PDEATHSIG, SIGKILL):

    orchestrator → torchrun (or node_agents → torchrun agents)   armed in Popen's preexec_fn
    torchrun agent → rank                                        armed by the rank at start

The signal fires when the thread that started the process exits: run_workers starts the group
and waits for it in the same thread, so it holds for the group's whole life.

A server (`distbench ui` / `server`: mlflow and the uvicorn worker it forks) is armed the same
way, but the worker is mlflow's child, out of reach: `python -m distbench.launch.lifeline
--group PGID` (start_group_guard) stops the server's whole process group once its parent dies.

What the killed ranks leave in /dev/shm (DeepSpeed's 66 MB per rank, never unlinked) would stay
with no one left to remove it: `python -m distbench.launch.lifeline PORT...`, started by
run_workers in a session of its own, waits for its parent's death and then removes the files of
those ports (run_workers kills it when the job ends the ordinary way).

    python -c "from distbench.launch.lifeline import die_with_parent; die_with_parent()"
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# What a torchrun agent's command line holds (python -m torch.distributed.run, or torchrun).
AGENT_MARKERS = (b"torch.distributed.run", b"torchrun")
WATCH_POLL_S = 0.5
SHM_SETTLE_S = 2.0  # for the ranks' own deaths (their agent's is instant): a second pass
GROUP_FLAG = "--group"  # `python -m distbench.launch.lifeline --group PGID PARENT`: guard_group
GROUP_GRACE_S = 5.0  # for a guarded group to stop on SIGTERM before SIGKILL


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up before any fork (a forked child should not load libraries)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when its parent dies; False where the
    platform has no such setting."""
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def die_with_parent() -> Callable[[], None] | None:
    """A Popen preexec_fn: the child is SIGKILLed when this process dies (also when it died
    between the fork and the prctl: the child then kills itself). None off Linux."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def arm() -> None:  # runs in the child, between fork and exec: no imports, no allocation
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


def die_with_agent() -> None:
    """In a rank started by a torchrun agent (TORCHELASTIC_RUN_ID is set): die when the agent
    dies. If the agent is already gone (this rank was re-parented before it could arm the
    signal), die now. A rank started any other way is left alone."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not set_parent_death_signal():
        return
    try:
        parent_cmdline = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        return  # cannot tell (hidden /proc): the signal is armed all the same
    if not any(marker in parent_cmdline for marker in AGENT_MARKERS):
        os.kill(os.getpid(), signal.SIGKILL)


def start_shm_watcher(ports: list[int]) -> subprocess.Popen | None:
    """Start the process that removes these ports' /dev/shm files once this process dies
    (None without ports). Its own session: a Ctrl-C to the terminal does not reach it."""
    if not ports:
        return None
    return subprocess.Popen(
        [sys.executable, "-m", "distbench.launch.lifeline", *map(str, ports)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )


def watch_parent(ports: list[int]) -> None:
    """Wait until the parent dies (this process is re-parented), then remove the ports'
    /dev/shm files, twice: when the parent dies the ranks die an instant later."""
    from distbench.launch.workers import remove_shm_leftovers

    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(WATCH_POLL_S)
    for attempt in range(2):
        for port in ports:
            remove_shm_leftovers(port)
        if attempt == 0:
            time.sleep(SHM_SETTLE_S)


def start_group_guard(pgid: int) -> subprocess.Popen:
    """Start the process that stops process group `pgid` (a server and the workers it forked,
    which no parent-death signal reaches) once this process dies; it exits by itself when the
    group is gone first. Its own session: outside the group it guards and the terminal's."""
    guard = [sys.executable, "-m", "distbench.launch.lifeline", GROUP_FLAG, str(pgid)]
    return subprocess.Popen(
        [*guard, str(os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )


def group_alive(pgid: int) -> bool:
    """Whether process group `pgid` has a member (a zombie counts until it is reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def guard_group(pgid: int, parent: int) -> None:
    """Wait until `parent` is no longer this process's parent, i.e. it died (then SIGTERM the
    group, SIGKILL what is left after GROUP_GRACE_S), or the group is gone (nothing to do)."""
    while os.getppid() == parent:
        if not group_alive(pgid):
            return
        time.sleep(WATCH_POLL_S)
    for sig, wait_s in ((signal.SIGTERM, GROUP_GRACE_S), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)


if __name__ == "__main__":
    if sys.argv[1:2] == [GROUP_FLAG]:
        guard_group(int(sys.argv[2]), int(sys.argv[3]))
    else:
        watch_parent([int(port) for port in sys.argv[1:]])
