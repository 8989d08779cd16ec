"""Watches a running worker group: heartbeats (startup and stalls) and per-rank memory.

Each rank rewrites JOB_DIR/heartbeat/rank<r> at every step; a rank whose file is older than
limits.stall_timeout_s has stopped making progress (a hang in a collective, a deadlock, a
sleep). Memory is the resident set of each rank process, read with psutil, against
limits.max_mem_gib. `check()` returns (failure_kind, reason) the moment one is seen.

    python run.py limits.stall_timeout_s=60 limits.max_mem_gib=4
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import psutil

from distbench.compose.schema import LimitsConfig
from distbench.figures.metrics import GIB
from distbench.launch.build_locks import describe_locks, torch_extensions_dir

# Frames that mean "waiting for the other ranks", not "stuck on its own".
COLLECTIVE_FRAMES = (
    "distributed_c10d.py",
    "deepspeed/comm/",
    "barrier",
    "all_reduce",
    "broadcast",
    "all_gather",
    "recv",
)
STACK_DUMP_WAIT_S = 2.0
AGENT_MODULE = "torch.distributed.run"  # what torchrun runs (launch/workers.py starts it so)


def rank_processes(root_pid: int) -> dict[int, psutil.Process]:
    """The rank processes under `root_pid` (torchrun, or node_agents over torchrun agents), by
    their RANK environment variable: only a process that a torchrun agent started itself counts
    as a rank. What a rank starts (the compilers of a DeepSpeed op build, a data loader's
    workers) inherits its RANK but is not the rank: its memory is not the rank's, and a signal
    meant for the rank must not reach it."""
    ranks = {}
    try:
        children = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return ranks
    for child in children:
        try:
            rank = child.environ().get("RANK")
            if rank is None or not rank.isdigit() or _is_agent(child):
                continue
            if not _is_agent(child.parent()):
                continue
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        ranks[int(rank)] = child
    return ranks


def _is_agent(process: psutil.Process | None) -> bool:
    """Whether `process` is a torchrun agent: `python -m torch.distributed.run ...` or the
    `torchrun` script (its argv, not any path in it that happens to hold the word)."""
    if process is None:
        return False
    argv = process.cmdline()
    return AGENT_MODULE in argv or any(Path(arg).name == "torchrun" for arg in argv[:2])


# The heartbeat a rank writes once it joined the process group, before its first step.
SETTING_UP = "-1"


class Watchdog:
    """Call check(pid) periodically while the group runs."""

    def __init__(
        self,
        job_dir: Path,
        world_size: int,
        limits: LimitsConfig,
        extensions_dir: Path | None = None,
    ) -> None:
        self.beats_dir = job_dir / "heartbeat"
        self.world_size = world_size
        self.limits = limits
        self.started_at = time.time()
        # the ranks' compiled-op cache (worker_env's): a build lock there holds a rank's start
        self.extensions_dir = extensions_dir or torch_extensions_dir(os.environ)

    def _heartbeats(self) -> dict[int, tuple[float, str]]:
        beats = {}
        for path in self.beats_dir.glob("rank*"):
            try:
                beats[int(path.name[4:])] = (path.stat().st_mtime, path.read_text().strip())
            except (OSError, ValueError):
                continue  # being rewritten: read it next time
        return beats

    def check_heartbeats(self, now: float) -> tuple[str, str] | None:
        beats = self._heartbeats()
        startup = self.limits.startup_timeout_s
        if len(beats) < self.world_size and now - self.started_at > startup:
            missing = sorted(set(range(self.world_size)) - set(beats))
            waited_on = describe_locks(self.extensions_dir)
            return "timeout", (
                f"rank {missing[0]} did not start within limits.startup_timeout_s={startup:g}"
                + (f" ({waited_on})" if waited_on else "")
            )
        # A rank that joined the process group but has not reached its first step (heartbeat
        # step -1) is still setting up: importing its model code, building the model and the
        # engine, which on a loaded host takes longer than a stall limit. That is start-up.
        setting_up = sorted(r for r, (_, step) in beats.items() if step == SETTING_UP)
        if setting_up and now - self.started_at > startup:
            return "timeout", (
                f"rank {setting_up[0]} did not reach its first step within "
                f"limits.startup_timeout_s={startup:g} (it joined the process group)"
            )
        stale = {
            r: (now - mtime, step)
            for r, (mtime, step) in beats.items()
            if now - mtime > self.limits.stall_timeout_s and step != SETTING_UP
        }
        if stale:
            age_s, step = max(stale.values())
            return "timeout", (
                f"no progress for {age_s:.0f} s on rank {', '.join(map(str, sorted(stale)))} "
                f"(limits.stall_timeout_s={self.limits.stall_timeout_s:g}; last heartbeat at "
                f"step {step})"
            )
        return None

    def check_memory(self, root_pid: int) -> tuple[str, str] | None:
        cap = self.limits.max_mem_gib
        if cap is None:
            return None
        for rank, process in rank_processes(root_pid).items():
            try:
                rss = process.memory_info().rss
            except psutil.NoSuchProcess:
                continue
            if rss > cap * GIB:
                return "oom", (
                    f"rank {rank} resident memory {rss / GIB:.2f} GiB > limits.max_mem_gib={cap:g}"
                )
        return None

    def blame(self, root_pid: int) -> str:
        """Ask every rank for its stacks (SIGUSR1 → faulthandler) and name the ranks that are
        not inside a collective: those hang; the others wait for them."""
        ranks = rank_processes(root_pid)
        for process in ranks.values():
            try:
                os.kill(process.pid, signal.SIGUSR1)
            except ProcessLookupError:
                continue
        time.sleep(STACK_DUMP_WAIT_S)
        stuck, waiting = [], []
        for rank in sorted(ranks):
            path = self.beats_dir.parent / f"stack.rank{rank}.txt"
            text = path.read_text() if path.exists() else ""
            threads = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text)
            main = next((t for t in threads if t.startswith("Current thread")), text)
            in_collective = any(frame in main for frame in COLLECTIVE_FRAMES)
            (waiting if in_collective else stuck).append(str(rank))
        if not stuck:
            return "every rank is inside a collective (stacks in stack.rank*.txt)"
        return (
            f"rank {', '.join(stuck)} stuck outside any collective, rank "
            f"{', '.join(waiting) or 'none'} waiting in one (stacks in stack.rank*.txt)"
        )

    def check(self, root_pid: int) -> tuple[str, str] | None:
        found = self.check_heartbeats(time.time()) or self.check_memory(root_pid)
        if found and found[0] == "timeout":
            return found[0], f"{self.blame(root_pid)}: {found[1]}"
        return found
