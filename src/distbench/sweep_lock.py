"""One sweep per sweep dir: the sweep holds an exclusive lock on SWEEP_DIR/.distbench.lock for
its whole life; a second sweep into the same dir is refused before any job starts.

Two sweeps in one dir would launch each job into the same job dir, clear each other's attempt
files and read one result.json as both their measurements. The lock is an fcntl.flock on an open
file: the kernel releases it when the holder dies, however it dies (SIGKILL included), so a
killed sweep never blocks the next one (`resume=true` into its dir). The file names the holder's
pid for the refusal; the file itself is left in place (its presence means nothing).

    python -c "from distbench.sweep_lock import hold_sweep_dir; hold_sweep_dir('/tmp/s'); \\
import time; time.sleep(60)" &   # a second hold_sweep_dir('/tmp/s') now raises SweepDirBusy
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from pathlib import Path

LOCK_FILE = ".distbench.lock"

_held: dict[Path, int] = {}  # dir → the open descriptor that holds its lock (this process)


class SweepDirBusy(RuntimeError):
    """Another live process holds the sweep dir; the message is one line naming the dir and
    the holder's pid."""


def _holder(fd: int) -> str:
    """The pid the holder wrote into the lock file, or 'unknown' (it has not written it yet)."""
    with contextlib.suppress(OSError):
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if text.isdigit():
            return text
    return "unknown"


def hold_sweep_dir(sweep_dir: Path | str) -> Path:
    """Lock `sweep_dir` (created if missing) for the rest of this process's life; raise
    SweepDirBusy when another process holds it. Returns the lock file. Idempotent within a
    process (a second Hydra multirun in one process keeps its lock)."""
    sweep_dir = Path(sweep_dir).resolve()
    if sweep_dir in _held:
        return sweep_dir / LOCK_FILE
    sweep_dir.mkdir(parents=True, exist_ok=True)
    path = sweep_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children (O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _holder(fd)
        os.close(fd)
        raise SweepDirBusy(
            f"the sweep dir {sweep_dir} is in use by another sweep (pid {pid}); wait for it to "
            "end, or set hydra.sweep.dir= to another dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[sweep_dir] = fd
    return path


def release_sweep_dir(sweep_dir: Path | str) -> None:
    """Give the lock back before this process ends (tests; a sweep keeps it to the end)."""
    fd = _held.pop(Path(sweep_dir).resolve(), None)
    if fd is not None:
        os.close(fd)


def hold_sweep_dir_or_exit(sweep_dir: Path | str) -> None:
    """hold_sweep_dir, or exit 2 with its one line (the sweep's start: no job has run yet)."""
    try:
        hold_sweep_dir(sweep_dir)
    except SweepDirBusy as exc:
        print(f"distbench: {exc}", file=sys.stderr)
        sys.exit(2)
