"""Config → worker command line; run it under a wall-clock timeout; classify how it ended.

The worker group runs in its own session, and torch's agent starts each rank in a session of
its own: on timeout or after exit the whole process tree (collected while its root lives) is
killed, checked gone, and none outlives its job; the group also dies with the orchestrator
(launch/lifeline.py). Each attempt starts from a job dir without the files of an earlier one.
Failure kinds are public (users filter runs on them): invalid_config, oom, timeout, crash,
collective_error, nccl_error.

    python -c "import distbench.launch.workers as w; print(w.worker_command('d', 2, 29500))"
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from distbench.launch.build_locks import (
    clear_before_launch,
    torch_extensions_dir,
    with_environment_ninja,
)
from distbench.launch.lifeline import die_with_parent, start_shm_watcher
from distbench.probes.threads import rank_threads

OOM_TYPES = ("OutOfMemoryError", "MemoryError")
OOM_PATTERNS = ("CUDA out of memory", "out of memory", "std::bad_alloc", "can't allocate memory")
# What a rank raises when a peer is gone or a collective broke (the peer is the root cause).
COLLECTIVE_PATTERNS = (
    "NCCL",
    "gloo",
    "Gloo",
    "Connection closed by peer",
    "Connection reset",
    "DistBackendError",
    "DistNetworkError",
    "ProcessGroup",
)
STDERR_TAIL_LINES = 30
POLL_S = 0.5
KILL_WAIT_S = 5.0  # after SIGKILL, for the kernel to take the processes down
# What one attempt leaves in its job dir (ranks: result, errors, heartbeats, stacks, progress;
# run_workers: the logs; the orchestrator: the stderr tail). A rerun into the same dir must
# not read an earlier attempt's: a stale result.json would turn a crash into FINISHED, stale
# heartbeats a healthy start into a stall.
ATTEMPT_FILES = (
    "result.json",
    "progress.jsonl",
    "workers.stdout.log",
    "workers.stderr.log",
    "stderr_tail.txt",
)
ATTEMPT_GLOBS = ("error.rank*.json", "stack.rank*.txt", ".result.json.*.tmp", ".error.rank*.tmp")
ATTEMPT_GLOBS += (
    "result.json.tmp",
    "error.rank*.json.tmp",
)  # as versions before 2026-11-23 named them
HEARTBEAT_DIR = "heartbeat"


@dataclass
class LaunchOutcome:
    """How a worker group ended: ok, or a failure kind with a one-line reason."""

    ok: bool
    returncode: int | None
    wall_time_s: float  # from launch to the last rank's exit
    failure_kind: str | None = None
    failure_reason: str | None = None
    stderr_tail: str = ""
    survivors: list[str] = field(default_factory=list)  # processes that outlived SIGKILL


def free_port() -> int:
    """A TCP port free right now on 127.0.0.1 (one per job: fixed ports collide in sweeps)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


MASTER_ADDR = "127.0.0.1"
SHM_DIR = Path("/dev/shm")


def remove_shm_leftovers(master_port: int, shm_dir: Path = SHM_DIR) -> list[Path]:
    """Delete the shared-memory files of a finished job's ranks.

    DeepSpeed's CPU all-reduce maps /dev/shm/deepspeed_*_<addr>_<port>_<rank> (66 MB each) and
    never unlinks them, not even on a clean exit; a killed rank cannot. /dev/shm is RAM: a sweep
    would fill the machine's memory within a hundred jobs. The port is unique to the job."""
    leftovers = list(shm_dir.glob(f"*_{MASTER_ADDR}_{master_port}_*"))
    for path in leftovers:
        path.unlink(missing_ok=True)
    return leftovers


def worker_command(run_dir: str | Path, nproc_per_node: int, master_port: int) -> list[str]:
    """The torchrun command line for one single-node job."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc_per_node}",
        "--nnodes=1",
        f"--master_addr={MASTER_ADDR}",
        f"--master_port={master_port}",
        "-m",
        "distbench.ranks.worker",
        str(run_dir),
    ]


def node_agent_command(
    run_dir: str | Path, num_nodes: int, nproc_per_node: int, rdzv_endpoint: str, rdzv_id: str
) -> list[str]:
    """The torchrun agent of one node of a multi-node job: the agents meet at a c10d rendezvous
    on `rdzv_endpoint` (host:port of the first node), which assigns the global ranks."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={num_nodes}",
        f"--nproc_per_node={nproc_per_node}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={rdzv_endpoint}",
        f"--rdzv_id={rdzv_id}",
        "--max_restarts=0",
        "-m",
        "distbench.ranks.worker",
        str(run_dir),
    ]


def srun_command(agent_cmd: list[str], num_nodes: int) -> list[str]:
    """One agent per node of the current SLURM allocation. `--overlap`: the orchestrator's own
    step holds the allocation's CPUs and memory (`--mem=0`: the step may use the job's memory on
    each node); `--kill-on-bad-exit`: one node failing stops the rest."""
    return [
        "srun",
        "--overlap",
        "--mem=0",
        f"--nodes={num_nodes}",
        f"--ntasks={num_nodes}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        *agent_cmd,
    ]


def local_nodes_command(agent_cmd: list[str], num_nodes: int) -> list[str]:
    """`num_nodes` agents on this machine (launch/node_agents.py): the cluster's path, locally."""
    return [sys.executable, "-m", "distbench.launch.node_agents", str(num_nodes), "--", *agent_cmd]


def first_node_of_allocation(nodelist: str) -> str:
    """The first host of a SLURM hostlist: `gpu[07-08,11],cpu3` → gpu07, `n[1-2]-ib` → n1-ib
    (SLURM lists an allocation's nodes in order; the first runs the batch script)."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?([^,\[]*)", nodelist.strip())
    if not match:
        raise ValueError(f"SLURM_JOB_NODELIST={nodelist!r} is not a hostlist")
    prefix, ranges, suffix = match.groups()
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0] + suffix


def worker_env(
    device: str, nproc_per_node: int, num_cores: int, ranks_sharing_cores: int | None = None
) -> dict[str, str]:
    """Environment for the ranks.

    OMP threads split the cores between the ranks that share them (`ranks_sharing_cores`, default
    the node's ranks; oversubscription costs 3x on CPU). LOCAL_SIZE is what DeepSpeed's CPU
    shared-memory all-reduce checks before using itself (only when it equals the world size;
    torchrun does not set it). Compiled DeepSpeed ops are cached in TORCH_EXTENSIONS_DIR, built
    with the environment's ninja."""
    env = with_environment_ninja(os.environ)
    sharing = ranks_sharing_cores or nproc_per_node
    env.setdefault("OMP_NUM_THREADS", str(rank_threads(num_cores, sharing)))
    env["DS_ACCELERATOR"] = "cuda" if device == "cuda" else "cpu"
    env["LOCAL_SIZE"] = str(nproc_per_node)
    env["TORCH_EXTENSIONS_DIR"] = str(torch_extensions_dir(env))  # one per Python environment
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


def clear_attempt_files(job_dir: Path) -> list[Path]:
    """Delete what an earlier attempt left in `job_dir` (ATTEMPT_FILES, ATTEMPT_GLOBS, the
    heartbeat dir); keep the rest (resolved.yaml, outcome.json, the spooled run). Returns what
    was deleted."""
    removed = [job_dir / name for name in ATTEMPT_FILES if (job_dir / name).exists()]
    for pattern in ATTEMPT_GLOBS:
        removed += sorted(job_dir.glob(pattern))
    for path in removed:
        path.unlink(missing_ok=True)
    beats = job_dir / HEARTBEAT_DIR
    if beats.exists():
        removed.append(beats)
        shutil.rmtree(beats, ignore_errors=True)
    return removed


def job_ports(cmd: list[str]) -> list[int]:
    """The ports a worker command line names (--master_port, --rdzv_endpoint): they name the
    job's DeepSpeed files in /dev/shm."""
    found = []
    for arg in cmd:
        match = re.match(r"--(?:master_port=|rdzv_endpoint=[^=]*:)(\d+)$", arg)
        if match:
            found.append(int(match.group(1)))
    return found


def _process_tree(pid: int) -> list[psutil.Process]:
    """The process and every process under it (empty once it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those still running (a zombie has exited: only its parent's wait is missing)."""
    left = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except psutil.NoSuchProcess:
            continue
    return left


def _signal_tree(procs: list[psutil.Process], sig: int) -> None:
    """`sig` to each process (a rank is in a session of its own) and to their process groups
    (what they forked since they were seen); SIGCONT after SIGTERM, so that a stopped process
    acts on it."""
    groups = set()
    for proc in procs:
        try:
            proc.send_signal(sig)  # psutil checks that the pid still names this process
            if sig == signal.SIGTERM:
                proc.send_signal(signal.SIGCONT)
            groups.add(os.getpgid(proc.pid))
        except (psutil.Error, ProcessLookupError):
            continue
    for group in groups - {os.getpgrp()}:  # never the caller's own group
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            continue


def _wait_gone(procs: list[psutil.Process], wait_s: float) -> list[psutil.Process]:
    deadline = time.monotonic() + wait_s
    left = _alive(procs)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _alive(left)
    return left


def _describe(proc: psutil.Process) -> str:
    try:
        cmdline = " ".join(proc.cmdline())
        status = proc.status()
    except psutil.Error:
        cmdline, status = "?", "?"
    return f"pid {proc.pid} ({status}: {cmdline[:200]})"


def _kill_group(
    proc: subprocess.Popen, seen: Iterable[psutil.Process] = (), grace_s: float = 5.0
) -> list[str]:
    """SIGTERM the worker group's whole process tree, SIGKILL what is left after `grace_s`
    (SIGKILL also ends a stopped process), and return the processes still alive after that.

    The tree is collected before anything is signalled: once torchrun is gone its ranks (each
    in its own session, so outside torchrun's process group) are orphans no longer found under
    it. `seen`: processes found under it earlier (ranks whose torchrun already died)."""
    procs = {p.pid: p for p in seen}
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_WAIT_S)):
        if proc.returncode is None:  # not reaped yet: its pid cannot name another process
            procs.update({p.pid: p for p in _process_tree(proc.pid)})
        alive = _alive(procs.values())
        if not alive:
            return []
        _signal_tree(alive, sig)
        left = _wait_gone(alive, wait_s)
        if not left:
            return []
    return [_describe(p) for p in left]


def oom_kill_count() -> int | None:
    """The kernel's count of processes killed by the OOM killer (/proc/vmstat oom_kill, which
    also counts cgroup OOM kills); None where it cannot be read."""
    try:
        match = re.search(r"^oom_kill (\d+)$", Path("/proc/vmstat").read_text(), re.M)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def signalled_ranks(stderr_tail: str) -> list[tuple[int, int]]:
    """(rank, signal number) of each rank torchrun's failure report says died by a signal,
    the root cause first; ranks torchrun itself stopped with SIGTERM come last."""
    report = stderr_tail[stderr_tail.rfind("Failures:") :] if "Failures:" in stderr_tail else ""
    root = report.split("Root Cause", 1)[-1] if "Root Cause" in report else ""
    found = []
    for block in (root, report):
        for rank, code in re.findall(r"\brank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", block, re.S):
            if int(code) < 0 and (int(rank), -int(code)) not in found:
                found.append((int(rank), -int(code)))
    return sorted(found, key=lambda rs: rs[1] == signal.SIGTERM)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _is_collective(err: dict) -> bool:
    return any(p in f"{err['type']} {err['message']}" for p in COLLECTIVE_PATTERNS)


def classify_failure(
    returncode: int | None,
    errors: list[dict],
    stderr_tail: str,
    oom_killed: bool = False,
) -> tuple[str, str]:
    """(failure_kind, one-line reason) of a worker group that exited without a result.

    Root cause first: an out-of-memory error on any rank; a rank killed by a signal (oom when
    the kernel's OOM-kill counter moved during the job, else crash); a rank's own Python error;
    and only then the collective errors its peers raised because it was gone. A SIGABRT beside
    another rank's own Python error is that error's consequence (gloo terminates a rank whose
    peer left mid-collective), so the error is named."""
    for err in sorted(errors, key=lambda e: e.get("rank", 0)):
        if err["type"] in OOM_TYPES or any(p in err["message"] for p in OOM_PATTERNS):
            return "oom", f"rank {err['rank']}: {err['type']}: {_first_line(err['message'])}"
    signalled = signalled_ranks(stderr_tail)
    own = [e for e in errors if not _is_collective(e)]
    aborted_by_peer = bool(signalled) and signalled[0][1] == signal.SIGABRT and bool(own)
    if signalled and signalled[0][1] != signal.SIGTERM and not aborted_by_peer:
        rank, signum = signalled[0]
        if signum == signal.SIGKILL and oom_killed:
            return "oom", f"rank {rank} killed by SIGKILL from the kernel's out-of-memory killer"
        return "crash", f"rank {rank} killed by {_signal_name(signum)}"
    if own:
        err = min(own, key=lambda e: e.get("rank", 0))
        return "crash", f"rank {err['rank']}: {err['type']}: {_first_line(err['message'])}"
    if returncode is not None and returncode < 0:  # torchrun itself died of a signal: the
        # root cause of the collective errors its ranks raised as they went down with it
        by_oom = -returncode == signal.SIGKILL and bool(oom_killed)
        how = _signal_name(-returncode) + (
            " from the kernel's out-of-memory killer" if by_oom else ""
        )
        return ("oom" if by_oom else "crash"), (
            f"the launcher (torchrun) was killed by {how}; its ranks were stopped with it"
        )
    if errors:
        err = min(errors, key=lambda e: e.get("rank", 0))
        kind = "nccl_error" if "NCCL" in err["message"] + err["type"] else "collective_error"
        return kind, f"rank {err['rank']}: {err['type']}: {_first_line(err['message'])}"
    if signalled:
        rank, signum = signalled[0]
        return "crash", f"rank {rank} killed by {_signal_name(signum)}"
    if any(p in stderr_tail for p in OOM_PATTERNS):
        return "oom", "out of memory (from the workers' stderr)"
    exited = re.search(r"\brank\s*:\s*(\d+).*?exitcode\s*:\s*(\d+)", stderr_tail, re.S)
    if exited:
        return "crash", (
            f"rank {exited.group(1)} exited with code {exited.group(2)} "
            "(no Python error recorded; see workers.stderr.log)"
        )
    meaningful = [ln.strip() for ln in stderr_tail.splitlines() if ln.strip().strip("=-*")]
    last = meaningful[-1] if meaningful else ""
    return "crash", f"worker group exited with code {returncode}: {last[:300]}"


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]


def run_workers(
    run_dir: Path,
    cmd: list[str],
    env: dict[str, str],
    timeout_s: float,
    on_poll: Callable[[], None] | None = None,
    watchdog: Callable[[int], tuple[str, str] | None] | None = None,
) -> LaunchOutcome:
    """Run the worker group until it exits, times out, or `watchdog(pid)` reports a failure
    (stall, memory cap); then kill whatever is left (and its /dev/shm files). An earlier
    attempt's files are deleted first; stdout/stderr go to files in run_dir."""
    clear_attempt_files(run_dir)
    if cmd[0] != "srun":  # a lock in a cluster's shared cache may be another node's build
        clear_before_launch(env)  # a lock left by a killed build would hold every rank
    start = time.monotonic()
    oom_kills_before = oom_kill_count()
    stopped: tuple[str, str] | None = None
    seen: dict[int, psutil.Process] = {}
    ports = job_ports(cmd)
    shm_watcher = start_shm_watcher(ports)  # removes the ranks' /dev/shm files if we are killed
    try:
        with (
            (run_dir / "workers.stdout.log").open("wb") as out,
            (run_dir / "workers.stderr.log").open("wb") as err,
        ):
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent(),  # the group dies with this process, even SIGKILLed
            )
            try:
                while proc.poll() is None:
                    seen.update({p.pid: p for p in _process_tree(proc.pid)})
                    if time.monotonic() - start > timeout_s:
                        stopped = ("timeout", f"no result within limits.timeout_s={timeout_s:g}")
                    elif watchdog is not None:
                        stopped = watchdog(proc.pid)
                    if stopped:
                        break
                    if on_poll:
                        on_poll()
                    time.sleep(POLL_S)
            finally:
                survivors = _kill_group(proc, seen.values())  # also ranks that outlived torchrun
                proc.wait()
                for port in ports:
                    remove_shm_leftovers(port)
    finally:
        if shm_watcher is not None:
            shm_watcher.kill()
            shm_watcher.wait()
    wall_time_s = time.monotonic() - start
    stderr_tail = _tail(run_dir / "workers.stderr.log")
    killed = "all ranks killed"
    if survivors:
        killed = f"{len(survivors)} process(es) survived SIGKILL: {'; '.join(survivors)}"
        print(f"distbench: warning: {killed}", file=sys.stderr, flush=True)
    # result.json is written by rank 0 after gathering every rank's figures: a rank that aborts
    # in teardown afterwards (gloo + DeepSpeed pipeline, SIGABRT) does not void the measurement.
    if stopped is None and (run_dir / "result.json").exists():
        return LaunchOutcome(
            True, proc.returncode, wall_time_s, stderr_tail=stderr_tail, survivors=survivors
        )
    if stopped is not None:
        kind, reason = stopped[0], f"{stopped[1]}; {killed}"
    else:
        errors = [json.loads(p.read_text()) for p in sorted(run_dir.glob("error.rank*.json"))]
        oom_kills_after = oom_kill_count()
        oom_killed = None not in (oom_kills_before, oom_kills_after) and (
            oom_kills_after > oom_kills_before
        )
        kind, reason = classify_failure(proc.returncode, errors, stderr_tail, oom_killed)
        if survivors:
            reason += f"; {killed}"
    return LaunchOutcome(False, proc.returncode, wall_time_s, kind, reason, stderr_tail, survivors)
