"""Config → worker command line; run it under a wall-clock timeout; classify how it ended.

The worker group runs in its own session (process group), so on timeout or after exit every
rank is killed with one signal and none outlives its job. Failure kinds are public (users
filter runs on them): invalid_config, oom, timeout, crash.

    python -c "from distbench.launch import worker_command; print(worker_command('d', 2, 29500))"
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FAILURE_KINDS = ("invalid_config", "oom", "timeout", "crash")
OOM_TYPES = ("OutOfMemoryError", "MemoryError")
OOM_PATTERNS = ("CUDA out of memory", "out of memory", "std::bad_alloc")
STDERR_TAIL_LINES = 30
POLL_S = 0.5


@dataclass
class LaunchOutcome:
    """How a worker group ended: ok, or a failure kind with a one-line reason."""

    ok: bool
    returncode: int | None
    wall_time_s: float
    failure_kind: str | None = None
    failure_reason: str | None = None
    stderr_tail: str = ""


def free_port() -> int:
    """A TCP port free right now on 127.0.0.1 (one per job: fixed ports collide in sweeps)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def worker_command(run_dir: str | Path, nproc_per_node: int, master_port: int) -> list[str]:
    """The torchrun command line for one single-node job."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc_per_node}",
        "--nnodes=1",
        "--master_addr=127.0.0.1",
        f"--master_port={master_port}",
        "-m",
        "distbench.worker",
        str(run_dir),
    ]


def worker_env(device: str, nproc_per_node: int, num_cores: int) -> dict[str, str]:
    """Environment for the ranks.

    OMP threads split the cores between ranks (oversubscription costs 3x on CPU). LOCAL_SIZE is
    what DeepSpeed's CPU shared-memory all-reduce checks before using itself (torchrun does not
    set it). Compiled DeepSpeed ops are cached across runs in TORCH_EXTENSIONS_DIR."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, num_cores // nproc_per_node)))
    env["DS_ACCELERATOR"] = "cuda" if device == "cuda" else "cpu"
    env["LOCAL_SIZE"] = str(nproc_per_node)
    env.setdefault(
        "TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "distbench" / "torch_extensions")
    )
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def _tail(path: Path, num_lines: int = STDERR_TAIL_LINES) -> str:
    if not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - 64 * 1024))
        lines = f.read().decode(errors="replace").splitlines()
    return "\n".join(lines[-num_lines:])


def _kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM the worker group, then SIGKILL what is left after `grace_s`."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def classify_failure(
    returncode: int | None, timed_out: bool, timeout_s: float, errors: list[dict], stderr_tail: str
) -> tuple[str, str]:
    """(failure_kind, one-line reason) from the structured error files first, then torchrun's
    exit report. A rank killed by SIGKILL with no Python error is the OS out-of-memory killer's
    signature (the kernel sends SIGKILL); we say "likely" because only dmesg could prove it."""
    if timed_out:
        return "timeout", f"no result within limits.timeout_s={timeout_s:g}; all ranks killed"
    for err in sorted(errors, key=lambda e: e.get("rank", 0)):
        if err["type"] in OOM_TYPES or any(p in err["message"] for p in OOM_PATTERNS):
            return "oom", f"rank {err['rank']}: {err['type']}: {_first_line(err['message'])}"
    if errors:
        err = min(errors, key=lambda e: e.get("rank", 0))
        return "crash", f"rank {err['rank']}: {err['type']}: {_first_line(err['message'])}"
    # torchrun's report names the first failing rank under "Root Cause"; the others it killed.
    report = stderr_tail.split("Root Cause", 1)[-1]
    signal_match = re.search(r"exitcode\s*:\s*-(\d+)", report)
    rank_match = re.search(r"\brank\s*:\s*(\d+)", report)
    where = f"rank {rank_match.group(1)}" if rank_match else "a rank"
    if signal_match:
        signum = int(signal_match.group(1))
        name = (
            signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else signum
        )
        if signum == signal.SIGKILL:
            return "oom", f"{where} killed by {name} (likely the OS out-of-memory killer)"
        return "crash", f"{where} killed by signal {name}"
    if any(p in stderr_tail for p in OOM_PATTERNS):
        return "oom", f"{where}: out of memory"
    last = next((ln for ln in reversed(stderr_tail.splitlines()) if ln.strip()), "")
    return "crash", f"worker group exited with code {returncode}: {last.strip()[:300]}"


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]


def run_workers(
    run_dir: Path,
    cmd: list[str],
    env: dict[str, str],
    timeout_s: float,
    on_poll: Callable[[], None] | None = None,
) -> LaunchOutcome:
    """Run the worker group to completion or timeout; stdout/stderr go to files in run_dir."""
    start = time.monotonic()
    with (
        (run_dir / "workers.stdout.log").open("wb") as out,
        (run_dir / "workers.stderr.log").open("wb") as err,
    ):
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
        timed_out = False
        try:
            while proc.poll() is None:
                if time.monotonic() - start > timeout_s:
                    timed_out = True
                    break
                if on_poll:
                    on_poll()
                time.sleep(POLL_S)
        finally:
            _kill_group(proc)  # also reaps ranks that outlived torchrun
            proc.wait()
    wall_time_s = time.monotonic() - start
    stderr_tail = _tail(run_dir / "workers.stderr.log")
    if not timed_out and proc.returncode == 0 and (run_dir / "result.json").exists():
        return LaunchOutcome(True, 0, wall_time_s, stderr_tail=stderr_tail)
    errors = [json.loads(p.read_text()) for p in sorted(run_dir.glob("error.rank*.json"))]
    kind, reason = classify_failure(proc.returncode, timed_out, timeout_s, errors, stderr_tail)
    return LaunchOutcome(False, proc.returncode, wall_time_s, kind, reason, stderr_tail)
