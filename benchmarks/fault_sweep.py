"""A fault harness: real faults injected into real sweeps, and what each one leaves behind.

Does every job still land as an MLflow run (exactly once), and is nothing left running or
holding /dev/shm, when a rank dies, stalls or is stopped, the orchestrator is signalled, raises
or is SIGKILLed, a job dir holds an earlier attempt's files, or the tracking store is down?

Each scenario runs `run.py` (and `distbench sync` where it says so) as real processes in its own
temporary dir with its own store, MLFLOW_TRACKING_URI=sqlite:///<dir>/mlflow.db:

    rank_faults      one sweep fault.kind=kill,stall,none × fault.at_step=1,99 (6 jobs; a fault
                     at step 99 never fires): 4 FINISHED, kill@1 → crash, stall@1 → timeout
    stale_files      a good run into hydra.run.dir=D, then fault.kind=raise into the same D: the
                     rerun is FAILED crash, not FINISHED from the earlier result.json
    resume_retry     a sweep FAILED by limits.max_mem_gib=0.001 (limits are not in the
                     signature), rerun into the same sweep dir with resume=true retry_failed=true
                     (a new run: distbench.attempt=2, distbench.previous_run_id), then with
                     resume=true (SKIPPED, no new run)
    sigstop_rank     SIGSTOP to rank 1 mid-job (no injected fault) → FAILED timeout after
                     limits.stall_timeout_s
    sigterm          SIGTERM to run.py while rank 1 stalls → FAILED cancelled, parent KILLED
    sigint           SIGINT to run.py's process group (Ctrl-C in a terminal), likewise
    sigkill          SIGKILL to run.py in job 2 of 2 → the ranks die with it; then
                     `distbench sync` on the sweep dir: runs expected are the jobs that ended
                     before the kill plus what sync records (the killed job, if it does)
    orch_exception   -m strategy.name=???,dp +unresolvable=${oc.env:...} (a mandatory value
                     left unset, an unresolvable override) → 2 FAILED children (invalid_config),
                     parent FINISHED
    orch_exception_env  the same with strategy=dp,zero1: only the unresolvable override raises
    store_down       a 1-job run against http://127.0.0.1:<a port with nothing listening>: the
                     run is spooled (mlflow_run.json), then `distbench sync` to the sqlite store

Measured per scenario: runs expected, runs recorded (job runs, tag distbench.job_dir, read back
with MlflowClient), runs lost (expected − recorded), processes left (live processes whose
command line names the scenario's dir or whose environment carries its marker, once it is over;
zombies excluded), /dev/shm left (files new since the scenario started that its processes
mapped or that carry one of its jobs' ports; other new files, e.g. of a test run going on
meanwhile, are counted apart), the outcome seen and the wall time.

    .venv/bin/python benchmarks/fault_sweep.py            # 10 steps, stall limit 60 s
    .venv/bin/python benchmarks/fault_sweep.py --quick    # 2 steps, stall 15 s (~5 min, 2 cores)
    .venv/bin/python benchmarks/fault_sweep.py --quick --only sigterm,sigint --keep

Prints a table; the last stdout line is one JSON document. Results are saved under
benchmarks/results/ (git-ignored; `--out-dir` elsewhere) as fault_sweep_<time>.{json,md}.
Exits 1 when a scenario loses a run or records one twice, leaves a process or a /dev/shm file,
or misses one of its expected outcomes (each named in the JSON's `checks`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
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


def scenario_ok(row: dict[str, Any]) -> bool:
    return (
        row["runs_lost"] == 0
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

    @property
    def marker(self) -> str:
        return str(self.dir)

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.dir}/mlflow.db"

    def env(self, uri: str | None = None) -> dict[str, str]:
        env = dict(os.environ, MLFLOW_TRACKING_URI=uri or self.uri)
        env[MARKER_ENV] = self.marker
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
    what: str, ready: Callable[[], bool], proc: subprocess.Popen, timeout_s: float
) -> None:
    """Poll until `ready()`; HarnessError when `proc` ends first or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None:
            raise HarnessError(f"run.py exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise HarnessError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.2)


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


# --- the scenarios ---------------------------------------------------------------------------
# Each returns fault, expected (runs), outcome (one line), checks ({what: held}), details.


def rank_faults(sc: Scene) -> dict[str, Any]:
    s = sc.settings
    sweep_dir = sc.dir / "sweep"
    args = ["-m", "fault.kind=kill,stall,none", "fault.at_step=1,99", "fault.rank=1"]
    args += [f"limits.stall_timeout_s={s.stall_timeout_s:g}", *s.steps()]
    proc, sweep_wall_s = sc.run_py([*args, f"hydra.sweep.dir={sweep_dir}"])
    outcomes = outcomes_in(sweep_dir)
    good = [o for o in outcomes if o["status"] == "FINISHED"]
    faulty = [o for o in outcomes if o["status"] == "FAILED"]
    jobs_wall_s = sum(o.get("wall_time_s", 0.0) for o in outcomes)
    kinds = sorted(o.get("failure_kind") or "?" for o in faulty)
    parents = parent_runs(store_runs(sc.uri))
    return {
        "fault": "rank 1 SIGKILLed / stalled at step 1 (6-job sweep)",
        "expected": 6,
        "outcome": f"{len(good)} FINISHED, FAILED {' + '.join(kinds) or '-'}",
        "checks": {
            "sweep exit 0": proc.returncode == 0,
            "4 FINISHED": len(good) == 4,
            "kill → crash, stall → timeout": kinds == ["crash", "timeout"],
            "parent FINISHED": statuses(parents) == ["FINISHED"],
        },
        "details": {
            "exit_code": proc.returncode,
            "num_jobs": len(outcomes),
            "num_finished": len(good),
            "num_failed": len(faulty),
            "failure_kinds": kinds,
            "failure_reasons": [(o.get("failure_reason") or "")[:200] for o in faulty],
            "stall_timeout_s": s.stall_timeout_s,
            "sweep_wall_s": round(sweep_wall_s, 1),
            "good_jobs_wall_s": round(sum(o.get("wall_time_s", 0.0) for o in good), 1),
            "faulty_jobs_wall_s": round(sum(o.get("wall_time_s", 0.0) for o in faulty), 1),
            "sweep_overhead_s": round(sweep_wall_s - jobs_wall_s, 1),
        },
    }


def stale_files(sc: Scene) -> dict[str, Any]:
    s = sc.settings
    job_dir = sc.dir / "job"
    first, first_wall_s = sc.run_py([*s.steps(), f"hydra.run.dir={job_dir}"])
    earlier = outcome_of(job_dir)
    had_result = (job_dir / "result.json").exists()
    raise_args = ["fault.kind=raise", "fault.rank=1", "fault.at_step=1"]
    second, _ = sc.run_py([*s.steps(), *raise_args, f"hydra.run.dir={job_dir}"])
    rerun = outcome_of(job_dir)
    runs = job_runs(store_runs(sc.uri))
    return {
        "fault": "rerun into a job dir with a finished run's files, rank 1 raises",
        "expected": 2,
        "outcome": f"1st {failure(earlier)}, rerun {failure(rerun)}",
        "checks": {
            "1st FINISHED with result.json": earlier.get("status") == "FINISHED" and had_result,
            "rerun FAILED crash": (rerun.get("status"), rerun.get("failure_kind"))
            == ("FAILED", "crash"),
            "rerun exit 1": second.returncode == 1,
            "stale result.json gone": not (job_dir / "result.json").exists(),
            "store: FAILED + FINISHED": statuses(runs) == ["FAILED", "FINISHED"],
        },
        "details": {
            "exit_codes": [first.returncode, second.returncode],
            "rerun_failure_reason": (rerun.get("failure_reason") or "")[:200],
            "first_wall_s": round(first_wall_s, 1),
            "first_outside_ranks_s": round(first_wall_s - earlier.get("wall_time_s", 0.0), 1),
        },
    }


def resume_retry(sc: Scene) -> dict[str, Any]:
    s = sc.settings
    sweep_dir = sc.dir / "sweep"
    base = ["-m", "world_size=2", *s.steps(), f"hydra.sweep.dir={sweep_dir}"]
    first, _ = sc.run_py([*base, "limits.max_mem_gib=0.001"])
    failed = outcome_of(sweep_dir / "0")
    retry, _ = sc.run_py([*base, "resume=true", "retry_failed=true"])
    retried = outcome_of(sweep_dir / "0")
    again, _ = sc.run_py([*base, "resume=true"])
    skipped = outcome_of(sweep_dir / "0")
    runs = job_runs(store_runs(sc.uri))
    finished = [r for r in runs if r.info.status == "FINISHED"]
    tags = finished[0].data.tags if finished else {}
    return {
        "fault": "memory cap kills job; resume=true retry_failed=true, then resume=true",
        "expected": 2,
        "outcome": (
            f"{failure(failed)} → retry {failure(retried)} (attempt "
            f"{tags.get('distbench.attempt', '?')}) → {skipped.get('status', '?')}"
        ),
        "checks": {
            "exit 0 ×3": [first.returncode, retry.returncode, again.returncode] == [0, 0, 0],
            "1st FAILED oom": (failed.get("status"), failed.get("failure_kind"))
            == ("FAILED", "oom"),
            "retry FINISHED": retried.get("status") == "FINISHED",
            "retry is attempt 2": tags.get("distbench.attempt") == "2",
            "retry links the failed run": bool(failed.get("run_id"))
            and tags.get("distbench.previous_run_id") == failed.get("run_id"),
            "3rd SKIPPED": skipped.get("status") == "SKIPPED",
            "store: FAILED + FINISHED": statuses(runs) == ["FAILED", "FINISHED"],
        },
        "details": {
            "failed_run_id": failed.get("run_id"),
            "retried_run_id": retried.get("run_id"),
            "retry_tags": {k: v for k, v in tags.items() if k.startswith("distbench.attempt")}
            | {"distbench.previous_run_id": tags.get("distbench.previous_run_id")},
            "skipped_reason": skipped.get("skipped_reason"),
        },
    }


def sigstop_rank(sc: Scene) -> dict[str, Any]:
    s = sc.settings
    sweep_dir = sc.dir / "sweep"
    job_dir = sweep_dir / "0"
    args = ["-m", "world_size=2", "model=tiny", "workload.num_warmup_steps=1"]
    args += [f"workload.num_steps={s.long_steps}", f"limits.stall_timeout_s={s.stall_timeout_s:g}"]
    proc = sc.start_run_py([*args, f"hydra.sweep.dir={sweep_dir}"])
    try:
        wait_for("rank 1 reached step 1", lambda: (heartbeat_step(job_dir, 1) or 0) >= 1, proc, 300)
        rank1 = rank_process(job_dir, 1)
        rank1.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        step_when_stopped = heartbeat_step(job_dir, 1)
        proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    recorded_after_s = time.monotonic() - stopped_at
    outcome = outcome_of(job_dir)
    reason = outcome.get("failure_reason") or ""
    return {
        "fault": f"SIGSTOP to rank 1 (stall limit {s.stall_timeout_s:g} s)",
        "expected": 1,
        "outcome": f"{failure(outcome)} {recorded_after_s:.0f} s after the stop",
        "checks": {
            "exit 0": proc.returncode == 0,
            "FAILED timeout": (outcome.get("status"), outcome.get("failure_kind"))
            == ("FAILED", "timeout"),
            "reason names rank 1": "rank 1" in reason,
            "within the stall limit + 60 s": recorded_after_s < s.stall_timeout_s + 60,
        },
        "details": {
            "stopped_pid": rank1.pid,
            "step_when_stopped": step_when_stopped,
            "recorded_after_s": round(recorded_after_s, 1),
            "failure_reason": reason[:300],
        },
    }


def signal_orchestrator(sc: Scene, sig: signal.Signals) -> dict[str, Any]:
    """SIGTERM to run.py, or SIGINT to its process group (what Ctrl-C in a terminal sends), while
    rank 1 stalls: the job is recorded as cancelled and the sweep's parent closed."""
    sweep_dir = sc.dir / "sweep"
    job_dir = sweep_dir / "0"
    ctrl_c = sig == signal.SIGINT
    proc = sc.start_run_py(stalled_sweep(sc.settings, sweep_dir), own_session=ctrl_c)
    try:
        wait_for("rank 1 stalled", lambda: heartbeat_step(job_dir, 1) == 1, proc, 300)
        if ctrl_c:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        signalled_at = time.monotonic()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    exited_after_s = time.monotonic() - signalled_at
    outcome = outcome_of(job_dir)
    runs = store_runs(sc.uri)
    children, parents = job_runs(runs), parent_runs(runs)
    child = children[0] if len(children) == 1 else None
    log = sc.log_tail(20_000)
    want_rc = 130 if ctrl_c else 143
    parent_status = ",".join(statuses(parents)) or "none"
    return {
        "fault": "Ctrl-C (SIGINT to run.py's group) mid-job"
        if ctrl_c
        else "SIGTERM to run.py mid-job",
        "expected": 1,
        "outcome": f"exit {proc.returncode}, {failure(outcome)}, parent {parent_status}",
        "checks": {
            f"exit {want_rc}": proc.returncode == want_rc,
            "FAILED cancelled": (outcome.get("status"), outcome.get("failure_kind"))
            == ("FAILED", "cancelled"),
            "run FAILED cancelled": child is not None
            and (child.info.status, child.data.tags.get("failure_kind")) == ("FAILED", "cancelled"),
            "parent KILLED": parent_status == "KILLED",
            "no traceback": "Traceback" not in log,
        },
        "details": {
            "exited_after_s": round(exited_after_s, 1),
            "failure_reason": outcome.get("failure_reason"),
            "log_tail": log[-600:],
        },
    }


def sigterm(sc: Scene) -> dict[str, Any]:
    return signal_orchestrator(sc, signal.SIGTERM)


def sigint(sc: Scene) -> dict[str, Any]:
    return signal_orchestrator(sc, signal.SIGINT)


def sigkill(sc: Scene) -> dict[str, Any]:
    """Job 1 of 2 finishes, job 2 stalls; run.py is SIGKILLed there (nothing of it can run):
    its ranks must die with it, and `distbench sync` records what was spooled."""
    s = sc.settings
    sweep_dir = sc.dir / "sweep"
    proc = sc.start_run_py(stalled_sweep(s, sweep_dir, kinds="none,stall"))
    try:
        wait_for(
            "job 2's rank 1 stalled", lambda: heartbeat_step(sweep_dir / "1", 1) == 1, proc, 400
        )
        before = [describe(p) for p in scenario_processes(sc.marker)]
        proc.kill()
        proc.wait()
        killed_at = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = scenario_processes(sc.marker)
    while left and time.monotonic() - killed_at < s.orphan_wait_s:
        time.sleep(0.2)
        left = scenario_processes(sc.marker)
    gone_after_s = time.monotonic() - killed_at
    finished_before = outcomes_in(sweep_dir)
    recorded_before_sync = len(job_runs(store_runs(sc.uri)))
    sync = sc.sync(sweep_dir)
    counts = count_uploaded(sync.stdout)
    runs = store_runs(sc.uri)
    children, parents = job_runs(runs), parent_runs(runs)
    killed_job = sweep_dir / "1"
    killed_runs = [r for r in children if r.data.tags.get(JOB_DIR_TAG) == str(killed_job.resolve())]
    killed_recorded = bool(killed_runs)
    killed_as = ", ".join(
        f"{r.info.status} {r.data.tags.get('failure_kind', '')}".strip() for r in killed_runs
    )
    parent_status = ",".join(statuses(parents)) or "none"
    return {
        "fault": "SIGKILL to run.py in job 2 of 2, then distbench sync",
        # the job that ended before the kill and the killed one, recorded by sync
        "expected": 2,
        "outcome": (
            f"{len(before)} procs, gone in {gone_after_s:.1f} s; sync "
            f"{sync_summary(counts, sync.returncode)}; "
            f"killed job: {killed_as or 'no run'}; "
            f"parent {parent_status}"
        ),
        "checks": {
            f"ranks gone within {s.orphan_wait_s:g} s": not left,
            "sync exit 0": sync.returncode == 0,
            "killed job FAILED orchestrator_lost": killed_as == "FAILED orchestrator_lost",
            "parent FINISHED": parent_status == "FINISHED",
        },
        "details": {
            "processes_before_kill": before,
            "processes_left_after_wait": [describe(p) for p in left],
            "gone_after_s": round(gone_after_s, 1),
            "jobs_ended_before_kill": len(finished_before),
            "recorded_before_sync": recorded_before_sync,
            "sync_rc": sync.returncode,
            "sync_output": (sync.stdout + sync.stderr)[-600:],
            "killed_job_outcome_json": (killed_job / "outcome.json").exists(),
            "killed_job_spooled": (killed_job / "mlflow_run.json").exists(),
            "killed_job_recorded": killed_recorded,
            "killed_job_runs": killed_as,
            "parent_status_after_sync": parent_status,
        },
    }


UNRESOLVABLE = "+unresolvable=${oc.env:DISTBENCH_NO_SUCH_VARIABLE}"


def exception_sweep(sc: Scene, sweep: str, fault: str) -> dict[str, Any]:
    """A 2-job sweep whose jobs raise inside the orchestrator (resolving their config): 2 FAILED
    invalid_config children and the sweep's parent FINISHED."""
    sweep_dir = sc.dir / "sweep"
    args = ["-m", sweep, UNRESOLVABLE, *sc.settings.steps()]
    proc, _ = sc.run_py([*args, f"hydra.sweep.dir={sweep_dir}"])
    runs = store_runs(sc.uri)
    children, parents = job_runs(runs), parent_runs(runs)
    kinds = sorted(r.data.tags.get("failure_kind", "?") for r in children)
    parent_status = ",".join(statuses(parents)) or "none"
    last_line = (proc.stderr.strip().splitlines() or [""])[-1]
    outcome = f"{len(children)} FAILED {'/'.join(sorted(set(kinds)))}, parent {parent_status}"
    return {
        "fault": fault,
        "expected": 2,
        "outcome": outcome,
        "checks": {
            "sweep exit 0": proc.returncode == 0,
            "2 FAILED invalid_config": statuses(children) == ["FAILED", "FAILED"]
            and set(kinds) == {"invalid_config"},
            "parent FINISHED": parent_status == "FINISHED",
            "no traceback": "Traceback" not in proc.stdout + proc.stderr,
        },
        "details": {
            "exit_code": proc.returncode,
            "stderr_last_line": last_line[:300],
            "reasons": [r.data.tags.get("failure_reason", "")[:200] for r in children],
        },
    }


def orch_exception(sc: Scene) -> dict[str, Any]:
    fault = "orchestrator raises: strategy.name=??? (unset) + unresolvable ${oc.env}"
    return exception_sweep(sc, "strategy.name=???,dp", fault)


def orch_exception_env(sc: Scene) -> dict[str, Any]:
    return exception_sweep(
        sc, "strategy=dp,zero1", "orchestrator raises: unresolvable ${oc.env} override"
    )


def store_down(sc: Scene) -> dict[str, Any]:
    from distbench.launch.workers import free_port

    s = sc.settings
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    job_dir = sc.dir / "job"
    proc, wall_s = sc.run_py([*s.steps(), f"hydra.run.dir={job_dir}"], uri=down)
    spooled = outcome_of(job_dir)
    outside_ranks_s = wall_s - spooled.get("wall_time_s", 0.0)
    sync = sc.sync(job_dir)
    counts = count_uploaded(sync.stdout)
    runs = job_runs(store_runs(sc.uri))
    return {
        "fault": "tracking server down (nothing listening), then distbench sync",
        "expected": 1,
        "outcome": (
            f"{spooled.get('status', '?')}, spooled; {outside_ranks_s:.0f} s outside the ranks; "
            f"sync {sync_summary(counts, sync.returncode)}"
        ),
        "checks": {
            "run exit 0": proc.returncode == 0,
            "spooled (mlflow_run.json + tracking_error)": (job_dir / "mlflow_run.json").exists()
            and "tracking_error" in spooled,
            "fails fast (< 30 s outside the ranks)": outside_ranks_s < 30,
            "sync: 1 uploaded": sync.returncode == 0 and counts == (1, 0),
            "FINISHED in the store": statuses(runs) == ["FINISHED"],
        },
        "details": {
            "wall_s": round(wall_s, 1),
            "ranks_wall_s": round(spooled.get("wall_time_s", 0.0), 1),
            "outside_ranks_s": round(outside_ranks_s, 1),
            "tracking_error": (spooled.get("tracking_error") or "")[:300],
            "sync_output": (sync.stdout + sync.stderr)[-400:],
        },
    }


SCENARIOS: dict[str, Callable[[Scene], dict[str, Any]]] = {
    "rank_faults": rank_faults,
    "stale_files": stale_files,
    "resume_retry": resume_retry,
    "sigstop_rank": sigstop_rank,
    "sigterm": sigterm,
    "sigint": sigint,
    "sigkill": sigkill,
    "orch_exception": orch_exception,
    "orch_exception_env": orch_exception_env,
    "store_down": store_down,
}


# --- running a scenario and measuring what it left ----------------------------------------------


@dataclass
class Row:
    scenario: str
    fault: str
    runs_expected: int
    runs_recorded: int
    runs_lost: int
    processes_left: list[str]
    shm_left: list[str]
    shm_new_other: int  # new /dev/shm files not this scenario's (another run on the machine)
    outcome: str
    wall_s: float
    checks: dict[str, bool]
    details: dict[str, Any] = field(default_factory=dict)
    ok: bool = False


def run_scenario(name: str, work: Path, settings: Settings) -> Row:
    sc = Scene(name, work / name, settings)
    sc.dir.mkdir(parents=True)
    shm_before = shm_listing()
    start = time.monotonic()
    with Watcher(sc.marker) as watcher:
        try:
            found = SCENARIOS[name](sc)
        except Exception as exc:  # a scenario that could not be driven is a failed row
            found = {
                "fault": name,
                "expected": 0,
                "outcome": f"harness error: {type(exc).__name__}: {exc}"[:300],
                "checks": {"scenario ran": False},
                "details": {"log_tail": sc.log_tail()},
            }
        wall_s = time.monotonic() - start
        deadline = time.monotonic() + settings.settle_s
        left = scenario_processes(sc.marker)
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = scenario_processes(sc.marker)
        processes_left = [describe(p) for p in left]
    # the lifeline watcher removes a killed job's files a moment after its ranks die
    deadline = max(deadline, time.monotonic() + 3)
    while True:
        mine, other = split_shm(
            new_files(shm_before, shm_listing()), watcher.ports, watcher.pids, watcher.mapped
        )
        if not mine or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    recorded = len(job_runs(store_runs(sc.uri)))
    for proc in left:  # what this harness started and the product left: end it, by pid
        with contextlib.suppress(psutil.Error):
            proc.kill()
    for name_left in mine:
        (SHM_DIR / name_left).unlink(missing_ok=True)
    row = Row(
        scenario=name,
        fault=found["fault"],
        runs_expected=found["expected"],
        runs_recorded=recorded,
        runs_lost=runs_lost(found["expected"], recorded),
        processes_left=processes_left,
        shm_left=sorted(mine),
        shm_new_other=len(other),
        outcome=found["outcome"],
        wall_s=round(wall_s, 1),
        checks=found["checks"],
        details={
            **found["details"],
            "dir": str(sc.dir),
            "ports": sorted(watcher.ports),
            "shm_mapped_seen": sorted(Path(m).name for m in watcher.mapped),
            "shm_new_other": sorted(other)[:20],
        },
    )
    row.ok = scenario_ok(asdict(row))
    return row


HEADERS = [
    "scenario",
    "fault injected",
    "runs expected",
    "runs recorded",
    "runs lost",
    "processes left",
    "/dev/shm left",
    "outcome",
    "wall s",
]


def table_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        failed = [k for k, held in r.checks.items() if not held]
        outcome = r.outcome + (f" — FAILED CHECKS: {'; '.join(failed)}" if failed else "")
        out.append(
            [
                r.scenario,
                r.fault,
                str(r.runs_expected),
                str(r.runs_recorded),
                str(r.runs_lost),
                str(len(r.processes_left)),
                str(len(r.shm_left)),
                outcome,
                f"{r.wall_s:.0f}",
            ]
        )
    return out


def print_table(rows: list[Row]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="distbench fault harness")
    for header in HEADERS:
        numeric = header.startswith(("runs", "processes", "/dev", "wall"))
        table.add_column(header, justify="right" if numeric else "left")
    for row in table_rows(rows):
        table.add_row(*row)
    Console(width=max(Console().width, 200)).print(table)


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for row in table_rows(rows):
        cells = [c.replace("|", "\\|") for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 steps, stall limit 15 s")
    parser.add_argument("--only", help=f"comma-separated, of: {','.join(SCENARIOS)}")
    parser.add_argument("--out-dir", type=Path, default=PROJECT_DIR / "benchmarks" / "results")
    parser.add_argument("--keep", action="store_true", help="keep the scenarios' dirs")
    args = parser.parse_args()
    settings = QUICK if args.quick else FULL
    names = args.only.split(",") if args.only else list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    work = Path(tempfile.mkdtemp(prefix="fault_sweep_"))
    start = time.monotonic()
    rows = []
    for name in names:
        print(f"fault_sweep: {name} ...", flush=True)
        rows.append(run_scenario(name, work, settings))
        row = rows[-1]
        print(
            f"fault_sweep: {name}: {'ok' if row.ok else 'FAILED'} in {row.wall_s:.0f} s: "
            f"{row.outcome}",
            flush=True,
        )
    print_table(rows)
    ok = all(r.ok for r in rows)
    if not ok or args.keep:
        print(f"fault_sweep: scenario dirs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    summary = {
        "benchmark": "fault_sweep",
        "quick": args.quick,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "settings": asdict(settings),
        "ok": ok,
        "wall_s": round(time.monotonic() - start, 1),
        "scenarios": [
            {k: v for k, v in asdict(r).items() if k != "details"}
            | {"processes_left": len(r.processes_left), "shm_left": len(r.shm_left)}
            for r in rows
        ],
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"fault_sweep_{time.strftime('%Y%m%d_%H%M%S')}"
    full = {**summary, "scenarios": [asdict(r) for r in rows]}
    (args.out_dir / f"{stem}.json").write_text(json.dumps(full, indent=2))
    (args.out_dir / f"{stem}.md").write_text(markdown_table(rows))
    summary["results_path"] = str(args.out_dir / f"{stem}.json")
    print(json.dumps(summary))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
