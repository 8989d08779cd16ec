"""Build locks that a killed build left in the ranks' compiled-op cache (TORCH_EXTENSIONS_DIR).

A rank that compiles an op (DeepSpeed's CPU communication op, ~1 min on 2 cores) holds torch's
build lock, `<TORCH_EXTENSIONS_DIR>/<op>/lock` (torch.utils.file_baton.FileBaton: a plain file
created with O_EXCL, kept open by the builder until the build ends, then removed). A rank killed
mid-build (a memory cap, a timeout, Ctrl-C, SIGKILL) leaves the file, and every later rank that
needs the op waits for it to vanish: forever, or until limits.startup_timeout_s.

Before the ranks start, run_workers removes every lock that no live process holds (no process
has the file open, none works in the op's build dir), seen so twice SETTLE_S apart: the builder
closes the file an instant before removing it. Not under srun: a cluster's shared cache may hold
another node's build, which this node's /proc cannot see. A startup timeout names a lock still
there (launch/watchdog.py).

    python -m distbench.launch.build_locks [TORCH_EXTENSIONS_DIR]   # lists them, and holders
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

LOCK_NAME = "lock"  # torch.utils.cpp_extension: os.path.join(build_directory, "lock")
SETTLE_S = 0.5  # the builder closes, then removes, the file within microseconds
PROC = Path("/proc")


def torch_extensions_dir(env: Mapping[str, str]) -> Path:
    """Where the ranks keep compiled ops: $TORCH_EXTENSIONS_DIR, else one cache per Python
    environment (builds from two venvs would overwrite each other's)."""
    if env.get("TORCH_EXTENSIONS_DIR"):
        return Path(env["TORCH_EXTENSIONS_DIR"])
    venv = hashlib.sha256(sys.prefix.encode()).hexdigest()[:8]
    return Path.home() / ".cache" / "distbench" / f"torch_extensions-{venv}"


def with_environment_ninja(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with this Python environment's bin dir first on PATH, so torch builds ops with the
    environment's own ninja (DeepSpeed's `ninja` dependency): a system ninja of another version
    hashes the build commands differently, and a cache built by one is rebuilt (~1 min) by the
    other, each time they alternate (an activated venv and a bare .venv/bin/python)."""
    bin_dir = str(Path(sys.executable).parent)
    path = env.get("PATH", "")
    if path.split(os.pathsep)[0] == bin_dir:
        return dict(env)
    return {**env, "PATH": os.pathsep.join(filter(None, (bin_dir, path)))}


def build_locks(extensions_dir: Path) -> list[Path]:
    """The build locks present in `extensions_dir` (one per op being built, or left behind)."""
    return sorted(Path(extensions_dir).glob(f"*/{LOCK_NAME}"))


def lock_holders(lock: Path) -> list[int] | None:
    """Pids of the processes building behind `lock`: the file open, or working in its build dir
    (ninja, the compilers). None where /proc cannot tell (not Linux)."""
    if not PROC.is_dir():
        return None
    target, build_dir = str(lock.resolve()), str(lock.parent.resolve())
    holders = []
    for entry in os.scandir(PROC):
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(f"{entry.path}/cwd")
        except OSError:
            cwd = ""
        if cwd == build_dir or cwd.startswith(build_dir + os.sep):
            holders.append(int(entry.name))
            continue
        try:
            fds = os.listdir(f"{entry.path}/fd")
        except OSError:
            continue  # gone, or another user's (who cannot build in this user's cache)
        for fd in fds:
            try:
                if os.readlink(f"{entry.path}/fd/{fd}") == target:
                    holders.append(int(entry.name))
                    break
            except OSError:
                continue
    return holders


def _identity(lock: Path) -> tuple[int, int] | None:
    try:
        stat = lock.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def clear_stale_locks(extensions_dir: Path, settle_s: float = SETTLE_S) -> list[Path]:
    """Remove the locks of `extensions_dir` that no process holds, now and `settle_s` later
    (the same file both times). Returns those removed; sleeps only when there is a candidate."""
    candidates = {
        lock: _identity(lock) for lock in build_locks(extensions_dir) if lock_holders(lock) == []
    }
    if not candidates:
        return []
    time.sleep(settle_s)
    removed = []
    for lock, seen in candidates.items():
        if seen is not None and _identity(lock) == seen and lock_holders(lock) == []:
            try:
                lock.unlink()
            except OSError:
                continue
            removed.append(lock)
    return removed


def clear_before_launch(env: Mapping[str, str]) -> list[Path]:
    """clear_stale_locks on the ranks' extensions dir, one line said per lock removed."""
    removed = clear_stale_locks(torch_extensions_dir(env))
    for lock in removed:
        print(
            f"distbench: removed the stale build lock {lock} (no process held it: a build "
            "was killed mid-way; the ranks would have waited on it until "
            "limits.startup_timeout_s)",
            flush=True,
        )
    return removed


def describe_locks(extensions_dir: Path) -> str | None:
    """What a rank that has not started may be waiting on: each build lock present and who
    holds it; None without one."""
    described = []
    for lock in build_locks(extensions_dir):
        holders = lock_holders(lock)
        if holders:
            who = f"held by pid {', '.join(map(str, holders))}"
        elif holders == []:
            who = "no process holds it: a killed build left it; remove it"
        else:
            who = "holder unknown"
        described.append(f"the build lock {lock} ({who})")
    return "waiting on " + "; ".join(described) if described else None


if __name__ == "__main__":
    where = Path(sys.argv[1]) if len(sys.argv) > 1 else torch_extensions_dir(os.environ)
    print(describe_locks(where) or f"no build lock in {where}")
