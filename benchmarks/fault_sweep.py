"""A fault harness: real faults injected into real sweeps, and what each one leaves behind.

Does every job still land as an MLflow run (exactly once), does every run end (none RUNNING
forever), and is nothing left running or holding /dev/shm, when a rank dies, stalls or is
stopped, the orchestrator is signalled, raises or is SIGKILLed (at any moment of a job's end),
two sweeps share a dir, a job dir holds an earlier attempt's files or cannot be written, a cache
or a build lock is damaged, the loss diverges, or the tracking store is down?

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
    sighup           SIGHUP to run.py (its terminal or ssh session closed), likewise (exit 129)
    sigkill          SIGKILL to run.py in job 2 of 2 → the ranks die with it; then
                     `distbench sync` on the sweep dir: runs expected are the jobs that ended
                     before the kill plus what sync records (the killed job, if it does)
    orch_exception   -m strategy.name=???,dp +unresolvable=${oc.env:...} (a mandatory value
                     left unset, an unresolvable override) → 2 FAILED children (invalid_config),
                     parent FINISHED
    orch_exception_env  the same with strategy=dp,zero1: only the unresolvable override raises
    store_down       a 1-job run against http://127.0.0.1:<a port with nothing listening>: the
                     run is spooled (mlflow_run.json), then `distbench sync` to the sqlite store

and the job-end and process edges of issue 28 (benchmarks/fault_scenarios.py: kill_after_outcome,
two_sweeps_one_dir, resume_after_sigkill, diverged, bad_cache, stale_build_lock,
readonly_job_dir; each described there).

Measured per scenario: runs expected, runs recorded (job runs, tag distbench.job_dir, read back
with MlflowClient), runs lost (expected − recorded), RUNNING-forever runs (job or parent runs
still RUNNING once the scenario and its sync are over), orphans (live processes whose command
line names the scenario's dir or whose environment carries its marker, once it is over; zombies
excluded), /dev/shm left (files new since the scenario started that its processes mapped or
that carry one of its jobs' ports; other new files, e.g. of a test run going on meanwhile, are
counted apart), the outcome seen and the wall time; then totals: cases, outcomes as expected,
lost runs, RUNNING-forever runs, orphans.

    .venv/bin/python benchmarks/fault_sweep.py            # 10 steps, stall limit 60 s
    .venv/bin/python benchmarks/fault_sweep.py --quick    # 2 steps, stall 15 s (~8 min, 2 cores)
    .venv/bin/python benchmarks/fault_sweep.py --quick --only sigterm,sighup --keep

Prints a table; the last stdout line is one JSON document. Results are saved under
benchmarks/results/ (git-ignored; `--out-dir` elsewhere) as fault_sweep_<time>.{json,md}.
Exits 1 when a scenario loses a run or records one twice, leaves a run RUNNING, a process or a
/dev/shm file, or misses one of its expected outcomes (each named in the JSON's `checks`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
from fault_harness import (  # benchmarks/ is this script's dir
    FULL,
    PROJECT_DIR,
    QUICK,
    RUN_TIMEOUT_S,
    SHM_DIR,
    Scene,
    Settings,
    Watcher,
    count_uploaded,
    describe,
    failure,
    heartbeat_step,
    job_runs,
    kill_and_reap,
    new_files,
    outcome_of,
    outcomes_in,
    parent_runs,
    rank_process,
    running_runs,
    runs_lost,
    scenario_ok,
    scenario_processes,
    shm_listing,
    split_shm,
    stalled_sweep,
    statuses,
    store_runs,
    sync_summary,
    wait_for,
    wait_gone,
)
from fault_scenarios import ISSUE_28_SCENARIOS

from distbench.tracking.spool import JOB_DIR_TAG

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
        kill_and_reap(proc)
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
    """SIGTERM or SIGHUP to run.py, or SIGINT to its process group (what Ctrl-C in a terminal
    sends), while rank 1 stalls: the job is recorded as cancelled and the sweep's parent closed."""
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
        kill_and_reap(proc)
    exited_after_s = time.monotonic() - signalled_at
    outcome = outcome_of(job_dir)
    runs = store_runs(sc.uri)
    children, parents = job_runs(runs), parent_runs(runs)
    child = children[0] if len(children) == 1 else None
    log = sc.log_tail(20_000)
    want_rc = 128 + int(sig)  # 143 SIGTERM, 130 SIGINT, 129 SIGHUP
    parent_status = ",".join(statuses(parents)) or "none"
    return {
        "fault": "Ctrl-C (SIGINT to run.py's group) mid-job"
        if ctrl_c
        else f"{sig.name} to run.py mid-job",
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


def sighup(sc: Scene) -> dict[str, Any]:
    return signal_orchestrator(sc, signal.SIGHUP)


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
        kill_and_reap(proc)
    left = wait_gone(sc.marker, killed_at, s.orphan_wait_s)
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
    "sighup": sighup,
    "sigkill": sigkill,
    "orch_exception": orch_exception,
    "orch_exception_env": orch_exception_env,
    "store_down": store_down,
    **ISSUE_28_SCENARIOS,
}


# --- running a scenario and measuring what it left ----------------------------------------------


@dataclass
class Row:
    scenario: str
    fault: str
    runs_expected: int
    runs_recorded: int
    runs_lost: int
    running_forever: int  # job and parent runs still RUNNING once the scenario (and sync) ended
    orphans: int  # len(processes_left)
    processes_left: list[str]
    shm_left: list[str]
    shm_new_other: int  # new /dev/shm files not this scenario's (another run on the machine)
    outcome: str
    wall_s: float
    checks: dict[str, bool]
    details: dict[str, Any] = field(default_factory=dict)
    ok: bool = False


def drive(name: str, sc: Scene) -> dict[str, Any]:
    """The scenario's own findings; a scenario that could not be driven is a failed row."""
    try:
        return SCENARIOS[name](sc)
    except Exception as exc:
        return {
            "fault": name,
            "expected": 0,
            "outcome": f"harness error: {type(exc).__name__}: {exc}"[:300],
            "checks": {"scenario ran": False},
            "details": {"log_tail": sc.log_tail()},
        }


def run_scenario(name: str, work: Path, settings: Settings) -> Row:
    sc = Scene(name, work / name, settings)
    sc.dir.mkdir(parents=True)
    shm_before = shm_listing()
    start = time.monotonic()
    with Watcher(sc.marker) as watcher:
        found = drive(name, sc)
        wall_s = time.monotonic() - start
        deadline = time.monotonic() + settings.settle_s
        left = wait_gone(sc.marker, time.monotonic(), settings.settle_s)
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
    runs = store_runs(sc.uri)
    recorded, running = len(job_runs(runs)), running_runs(runs)
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
        running_forever=len(running),
        orphans=len(processes_left),
        processes_left=processes_left,
        shm_left=sorted(mine),
        shm_new_other=len(other),
        outcome=found["outcome"],
        wall_s=round(wall_s, 1),
        checks=found["checks"],
        details={
            **found["details"],
            "dir": str(sc.dir),
            "running_forever_runs": [
                f"{'parent' if JOB_DIR_TAG not in r.data.tags else 'job'} {r.info.run_name} "
                f"{r.info.run_id} {r.data.tags.get(JOB_DIR_TAG, '')}".strip()
                for r in running
            ],
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
    "RUNNING forever",
    "orphans",
    "/dev/shm left",
    "outcome",
    "wall s",
]


def table_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        failed = [k for k, held in r.checks.items() if not held]
        outcome = r.outcome + (f" — FAILED CHECKS: {'; '.join(failed)}" if failed else "")
        counts = [r.runs_expected, r.runs_recorded, r.runs_lost, r.running_forever, r.orphans]
        counts.append(len(r.shm_left))
        out.append([r.scenario, r.fault, *map(str, counts), outcome, f"{r.wall_s:.0f}"])
    return out


def totals(rows: list[Row]) -> dict[str, int]:
    """The run's totals: cases, outcomes as expected (every check held), runs lost (and recorded
    twice), RUNNING-forever runs, orphans, /dev/shm files left."""
    return {
        "cases": len(rows),
        "outcomes_as_expected": sum(all(r.checks.values()) for r in rows),
        "runs_lost": sum(max(r.runs_lost, 0) for r in rows),
        "runs_recorded_twice": sum(max(-r.runs_lost, 0) for r in rows),
        "running_forever": sum(r.running_forever for r in rows),
        "orphans": sum(r.orphans for r in rows),
        "shm_left": sum(len(r.shm_left) for r in rows),
    }


def totals_line(t: dict[str, int]) -> str:
    return (
        f"cases {t['cases']}, outcomes as expected {t['outcomes_as_expected']}/{t['cases']}, "
        f"lost runs {t['runs_lost']} (recorded twice {t['runs_recorded_twice']}), "
        f"RUNNING-forever runs {t['running_forever']}, orphans {t['orphans']}, "
        f"/dev/shm left {t['shm_left']}"
    )


def print_table(rows: list[Row]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="distbench fault harness", caption=totals_line(totals(rows)))
    for header in HEADERS:
        numeric = header.startswith(("runs", "RUNNING", "orphans", "/dev", "wall"))
        table.add_column(header, justify="right" if numeric else "left")
    for row in table_rows(rows):
        table.add_row(*row)
    Console(width=max(Console().width, 200)).print(table)


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for row in table_rows(rows):
        cells = [c.replace("|", "\\|") for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\nTotals: {totals_line(totals(rows))}.\n"


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
    print(f"fault_sweep: {totals_line(totals(rows))}")
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
        "totals": totals(rows),
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
