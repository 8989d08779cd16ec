"""What the fault harness (benchmarks/fault_sweep.py) shares with its scenarios: what counts (runs
lost, RUNNING runs, the scenario's processes and /dev/shm files), how a scenario drives run.py
and `distbench sync` (Scene: its own dir, store and environment) and reads back what they left.

Not run on its own: `python benchmarks/fault_sweep.py --help`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from distbench.launch.workers import MASTER_ADDR, SHM_DIR, job_ports
from distbench.tracking.spool import JOB_DIR_TAG, SWEEP_DIR_TAG

PROJECT_DIR = Path(__file__).resolve().parents[1]
RUN_PY = PROJECT_DIR / "run.py"
# Every process a scenario starts inherits it (value: the scenario's dir), so that what it left
# is found even where its command line does not name the dir (the /dev/shm lifeline watcher).
MARKER_ENV = "DISTBENCH_FAULT_HARNESS"
EXPERIMENT = "distbench"
PARENT_TAG = "mlflow.parentRunId"
RUN_TIMEOUT_S = 900
SAMPLE_S = 0.25


@dataclass(frozen=True)
class Settings:
    num_steps: int
    stall_timeout_s: float
    long_steps: int  # the SIGSTOP job's: still stepping when rank 1 is stopped
    settle_s: float  # how long a scenario's processes get to exit once it is over
    orphan_wait_s: float  # after a SIGKILLed orchestrator: its ranks must be gone by then

    def steps(self) -> list[str]:
        return ["model=tiny", "workload.num_warmup_steps=1", f"workload.num_steps={self.num_steps}"]


QUICK = Settings(num_steps=2, stall_timeout_s=15, long_steps=40, settle_s=5, orphan_wait_s=10)
FULL = Settings(num_steps=10, stall_timeout_s=60, long_steps=100, settle_s=5, orphan_wait_s=10)


class HarnessError(RuntimeError):
    """The scenario could not be driven as planned (a job ended before its fault, ...)."""


# --- pure helpers: what counts --------------------------------------------------------------


def mentions(cmdline: Iterable[str], environ: dict[str, str] | None, marker: str) -> bool:
    """Whether a process belongs to the scenario `marker` (its dir): named on its command line,
    or carrying MARKER_ENV=marker in its environment."""
    return any(marker in part for part in cmdline) or (environ or {}).get(MARKER_ENV) == marker


def ports_in(cmdline: Iterable[str]) -> set[int]:
    """The rendezvous ports a torchrun / lifeline command line names (they name the job's
    DeepSpeed files in /dev/shm: *_127.0.0.1_<port>_*)."""
    args = list(cmdline)
    found = set(job_ports(args))
    if "distbench.launch.lifeline" in args:  # python -m distbench.launch.lifeline PORT...
        after = args[args.index("distbench.launch.lifeline") + 1 :]
        found.update(int(a) for a in after if a.isdigit())
    return found


def new_files(before: Iterable[str], after: Iterable[str]) -> set[str]:
    return set(after) - set(before)


def split_shm(
    files: Iterable[str], ports: Iterable[int], pids: Iterable[int], mapped: Iterable[str]
) -> tuple[set[str], set[str]]:
    """(the scenario's, the others') among new /dev/shm files: the scenario's are those its
    processes mapped, or named by one of its ports (DeepSpeed) or pids (torch_<pid>_*)."""
    marks = [f"_{MASTER_ADDR}_{port}_" for port in ports] + [f"torch_{pid}_" for pid in pids]
    mapped = {Path(m).name for m in mapped}
    mine = {f for f in files if f in mapped or any(m in f for m in marks)}
    return mine, set(files) - mine


def job_runs(runs: Iterable[Any]) -> list[Any]:
    """The runs of jobs (tagged with their job dir), not the sweeps' parent runs."""
    return [r for r in runs if JOB_DIR_TAG in r.data.tags]


def parent_runs(runs: Iterable[Any]) -> list[Any]:
    return [r for r in runs if PARENT_TAG not in r.data.tags and SWEEP_DIR_TAG in r.data.tags]


def statuses(runs: Iterable[Any]) -> list[str]:
    return sorted(r.info.status for r in runs)


def runs_lost(expected: int, recorded: int) -> int:
    """Expected − recorded: > 0 lost, < 0 recorded twice."""
    return expected - recorded


def running_runs(runs: Iterable[Any]) -> list[Any]:
    """Runs (jobs' and parents') still RUNNING: once a scenario and its sync are over, RUNNING
    forever (no process is left to end them)."""
    return [r for r in runs if r.info.status == "RUNNING"]


def scenario_ok(row: dict[str, Any]) -> bool:
    return (
        row["runs_lost"] == 0
        and row["running_forever"] == 0
        and not row["processes_left"]
        and not row["shm_left"]
        and all(row["checks"].values())
    )


def count_uploaded(sync_stdout: str) -> tuple[int, int] | None:
    """(uploaded, already in the store) from `distbench sync`'s summary line."""
    match = re.search(r"(\d+) uploaded, (\d+) already in the store", sync_stdout)
    return (int(match.group(1)), int(match.group(2))) if match else None


def sync_summary(counts: tuple[int, int] | None, returncode: int) -> str:
    if counts is None:
        return f"exit {returncode}"
    return f"{counts[0]} uploaded, {counts[1]} already in store"


# --- processes, /dev/shm, the store ---------------------------------------------------------


def scenario_processes(marker: str) -> list[psutil.Process]:
    """Live processes (zombies excluded) of the scenario whose dir is `marker`."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            environ = proc.environ()
        except psutil.Error:
            environ = None
        if mentions(proc.info["cmdline"] or [], environ, marker):
            found.append(proc)
    return found


def describe(proc: psutil.Process) -> str:
    try:
        return f"pid {proc.pid} {proc.status()}: {' '.join(proc.cmdline())[:160]}"
    except psutil.Error:
        return f"pid {proc.pid} (gone)"


def shm_listing() -> set[str]:
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def mapped_shm(pid: int) -> set[str]:
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    return {line.split(None, 5)[5] for line in maps.splitlines() if " /dev/shm/" in line}


class Watcher:
    """Samples the scenario's processes while it runs: their pids, ports and mapped /dev/shm
    files (a killed job leaves no outcome.json naming its port)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.pids: set[int] = set()
        self.ports: set[int] = set()
        self.mapped: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        for proc in scenario_processes(self.marker):
            try:
                cmdline = proc.cmdline()
            except psutil.Error:
                continue
            self.pids.add(proc.pid)
            self.ports.update(ports_in(cmdline))
            self.mapped.update(mapped_shm(proc.pid))


def store_runs(uri: str) -> list[Any]:
    """Every active run of the experiment in the store at `uri` (none when it was never made)."""
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        return []
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        return []
    return client.search_runs([experiment.experiment_id], max_results=10_000)


# --- driving run.py --------------------------------------------------------------------------


@dataclass
class Scene:
    """One scenario's dir, store and environment."""

    name: str
    dir: Path
    settings: Settings
    runs: int = 0  # run.py runs to their end so far (their output: run_py.<n>.log)
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. DISTBENCH_CACHE_DIR

    @property
    def marker(self) -> str:
        return str(self.dir)

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.dir}/mlflow.db"

    def env(self, uri: str | None = None) -> dict[str, str]:
        env = dict(os.environ, MLFLOW_TRACKING_URI=uri or self.uri)
        env[MARKER_ENV] = self.marker
        env.update(self.extra_env)
        env.pop("DISTBENCH_PARENT_RUN_ID", None)
        env.pop("DISTBENCH_TRACKING_URI", None)
        return env

    def run_py(
        self, args: list[str], uri: str | None = None
    ) -> tuple[subprocess.CompletedProcess, float]:
        """`python run.py ARGS` to its end: the process and its wall time."""
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, str(RUN_PY), *args],
            cwd=self.dir,
            env=self.env(uri),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        self.runs += 1
        (self.dir / f"run_py.{self.runs}.log").write_text(proc.stdout + proc.stderr)
        return proc, time.monotonic() - start

    def start_run_py(self, args: list[str], own_session: bool = False) -> subprocess.Popen:
        """`python run.py ARGS` in the background, its output in <dir>/run_py.log."""
        log = (self.dir / "run_py.log").open("w")
        return subprocess.Popen(
            [sys.executable, str(RUN_PY), *args],
            cwd=self.dir,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=own_session,
        )

    def log_tail(self, chars: int = 2000) -> str:
        path = self.dir / "run_py.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def sync(self, target: Path) -> subprocess.CompletedProcess:
        """`distbench sync TARGET` into this scenario's sqlite store."""
        return subprocess.run(
            [sys.executable, "-m", "distbench.cli", "sync", str(target)],
            cwd=self.dir,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )


def outcome_of(job_dir: Path) -> dict[str, Any]:
    path = job_dir / "outcome.json"
    return json.loads(path.read_text()) if path.exists() else {}


def outcomes_in(sweep_dir: Path) -> list[dict[str, Any]]:
    paths = sorted(sweep_dir.glob("*/outcome.json"), key=lambda p: int(p.parent.name))
    return [json.loads(p.read_text()) for p in paths]


def heartbeat_step(job_dir: Path, rank: int) -> int | None:
    try:
        return int((job_dir / "heartbeat" / f"rank{rank}").read_text().strip())
    except (OSError, ValueError):
        return None


def wait_for(
    what: str,
    ready: Callable[[], bool],
    proc: subprocess.Popen,
    timeout_s: float,
    poll_s: float = 0.2,
) -> None:
    """Poll until `ready()`; HarnessError when `proc` ends first or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None:
            raise HarnessError(f"run.py exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise HarnessError(f"{what}: not within {timeout_s:g} s")
        time.sleep(poll_s)


def wait_gone(marker: str, since: float, timeout_s: float) -> list[psutil.Process]:
    """The scenario's processes still alive `timeout_s` after `since` (none: all gone)."""
    left = scenario_processes(marker)
    while left and time.monotonic() - since < timeout_s:
        time.sleep(0.2)
        left = scenario_processes(marker)
    return left


def kill_and_reap(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def rank_process(job_dir: Path, rank: int) -> psutil.Process:
    """The process of `rank` in the job whose dir is `job_dir` (torchrun sets RANK)."""
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "distbench.ranks.worker" not in cmdline or str(job_dir) not in cmdline:
            continue
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("RANK") == str(rank):
                return proc
    raise HarnessError(f"no process of rank {rank} under {job_dir}")


def failure(outcome: dict[str, Any]) -> str:
    return f"{outcome.get('status', 'no outcome')} {outcome.get('failure_kind') or ''}".strip()


def stalled_sweep(s: Settings, sweep_dir: Path, kinds: str = "stall") -> list[str]:
    """A sweep whose (last) job stalls on rank 1 at step 1 with no stall limit in reach."""
    return [
        "-m",
        "world_size=2",
        f"fault.kind={kinds}",
        "fault.rank=1",
        "fault.at_step=1",
        "limits.stall_timeout_s=600",
        *s.steps(),
        f"hydra.sweep.dir={sweep_dir}",
    ]
