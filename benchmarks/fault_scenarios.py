"""The fault harness's scenarios for a job's end and the processes around it (issue 28): each
drives real run.py / `distbench sync` processes through a benchmarks/fault_harness.py Scene and
returns what it saw; benchmarks/fault_sweep.py runs them with the others and counts what each
left (runs lost, runs RUNNING forever, orphans, /dev/shm files).

    kill_after_outcome   -m strategy=dp,zero1: SIGKILL to run.py the moment job 1's outcome.json
                         exists (polled every 5 ms: its run spooled, perhaps not yet logged),
                         then `distbench sync`: job 1 FINISHED once, no run RUNNING
    two_sweeps_one_dir   a second sweep into a dir a running sweep holds: refused in one line
                         (exit 2, the dir and the holder's pid); the first sweep unharmed
    resume_after_sigkill -m workload.num_steps=N,N+8: SIGKILL to run.py in job 2, then the same
                         sweep with resume=true (no sync): the killed attempt FAILED
                         orchestrator_lost, its parent KILLED, job 1 SKIPPED, job 2 rerun
    diverged             workload.lr=1e6 (5 steps, no warm-up) → FAILED diverged, the step named
    bad_cache            `null` in step_parts.json and reference_losses.json of
                         $DISTBENCH_CACHE_DIR, hardware.time_source=measured → FINISHED, both
                         files measured again and rewritten as objects, equivalence checked
    stale_build_lock     <TORCH_EXTENSIONS_DIR>/deepspeed_shm_comm/lock with no owner (a copy of
                         this venv's built ops) → the job starts, one line names the lock
    readonly_job_dir     the job dir becomes unwritable mid-job (swapped for a file: chmod binds
                         no root), then comes back and `distbench sync`: the job's one run FAILED
                         (spool_error), counted by the parent, its outcome.json written back, no
                         false orchestrator_lost

    .venv/bin/python benchmarks/fault_sweep.py --quick --only kill_after_outcome,diverged
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fault_harness import (
    RUN_TIMEOUT_S,
    Scene,
    count_uploaded,
    failure,
    heartbeat_step,
    job_runs,
    kill_and_reap,
    outcome_of,
    outcomes_in,
    parent_runs,
    running_runs,
    statuses,
    store_runs,
    sync_summary,
    wait_for,
    wait_gone,
)

from distbench.launch.build_locks import torch_extensions_dir
from distbench.orphans import OWNER_FILE
from distbench.probes.cache import CACHE_DIR_ENV
from distbench.tracking.spool import ATTEMPT_TAG, JOB_DIR_TAG, OUTCOME, PAYLOAD

LOST = "orchestrator_lost"
OP = "deepspeed_shm_comm"  # the op DeepSpeed's ranks build on CPU


def kinds(runs: list[Any]) -> str:
    """'FINISHED, FAILED orchestrator_lost' for these runs."""
    said = [f"{r.info.status} {r.data.tags.get('failure_kind', '')}".strip() for r in runs]
    return ", ".join(sorted(said)) or "no run"


def runs_of(runs: list[Any], job_dir: Path) -> list[Any]:
    return [r for r in runs if r.data.tags.get(JOB_DIR_TAG) == str(job_dir.resolve())]


def parents_said(runs: list[Any]) -> str:
    return ",".join(statuses(parent_runs(runs))) or "none"


def started_jobs(sweep_dir: Path) -> list[Path]:
    """Job dirs whose orchestrator started the job (it named itself: orchestrator.json)."""
    return sorted(d for d in sweep_dir.iterdir() if d.is_dir() and (d / OWNER_FILE).exists())


def tiny_sweep(sc: Scene, sweep_dir: Path, *extra: str) -> list[str]:
    return ["-m", *extra, *sc.settings.steps(), f"hydra.sweep.dir={sweep_dir}"]


def kill_after_outcome(sc: Scene) -> dict[str, Any]:
    sweep_dir = sc.dir / "sweep"
    job_dir = sweep_dir / "0"
    proc = sc.start_run_py(tiny_sweep(sc, sweep_dir, "strategy=dp,zero1"))
    try:
        wait_for(
            "job 1's outcome.json", (job_dir / OUTCOME).exists, proc, RUN_TIMEOUT_S, poll_s=0.005
        )
        proc.kill()
        proc.wait()
        killed_at = time.monotonic()
    finally:
        kill_and_reap(proc)
    left = wait_gone(sc.marker, killed_at, sc.settings.orphan_wait_s)
    before = store_runs(sc.uri)
    in_window = kinds(runs_of(before, job_dir))  # RUNNING: killed before its run was logged
    spooled = (job_dir / PAYLOAD).exists()
    sync = sc.sync(sweep_dir)
    synced = sync_summary(count_uploaded(sync.stdout), sync.returncode)
    runs = store_runs(sc.uri)
    job1 = runs_of(runs, job_dir)
    return {
        "fault": "SIGKILL to run.py once job 1's outcome.json exists, then distbench sync",
        "expected": len(started_jobs(sweep_dir)),  # job 1, and job 2 if it had started
        "outcome": (
            f"job 1 at the kill: {in_window}; sync {synced}"
            f" → job 1 {kinds(job1)}, job 2 {kinds(runs_of(runs, sweep_dir / '1'))}, "
            f"parent {parents_said(runs)}"
        ),
        "checks": {
            f"ranks gone within {sc.settings.orphan_wait_s:g} s": not left,
            "job 1 was spooled": spooled,
            "sync exit 0": sync.returncode == 0,
            "job 1 FINISHED once": statuses(job1) == ["FINISHED"],
            "parent ended": parents_said(runs) in ("KILLED", "FINISHED"),
        },
        "details": {
            "job1_runs_at_kill": in_window,
            "jobs_started": [d.name for d in started_jobs(sweep_dir)],
            "sync_output": (sync.stdout + sync.stderr)[-600:],
        },
    }


def two_sweeps_one_dir(sc: Scene) -> dict[str, Any]:
    sweep_dir = sc.dir / "sweep"
    args = tiny_sweep(sc, sweep_dir, "strategy=dp,zero1")
    first = sc.start_run_py(args)
    try:
        wait_for("the first sweep's job 1", (sweep_dir / "0" / OWNER_FILE).exists, first, 300)
        second, second_wall_s = sc.run_py(args)
        first.wait(timeout=RUN_TIMEOUT_S)
    finally:
        kill_and_reap(first)
    lines = [line for line in second.stderr.splitlines() if line.strip()]
    refusal = lines[0] if lines else ""
    outcomes = outcomes_in(sweep_dir)
    runs = store_runs(sc.uri)
    children = job_runs(runs)
    strategies = sorted(o.get("strategy", "?") for o in outcomes)
    return {
        "fault": "a second sweep into the dir of a sweep that runs",
        "expected": 2,
        "outcome": (
            f"2nd exit {second.returncode} in {second_wall_s:.0f} s, {len(lines)} line; "
            f"1st exit {first.returncode}: {' + '.join(failure(o) for o in outcomes)}, "
            f"parent {parents_said(runs)}"
        ),
        "checks": {
            "2nd refused (exit 2)": second.returncode == 2,
            "in one line naming the dir and the holder": len(lines) == 1
            and str(sweep_dir.resolve()) in refusal
            and f"pid {first.pid}" in refusal,
            "no traceback": "Traceback" not in second.stdout + second.stderr,
            "1st exit 0": first.returncode == 0,
            "1st: dp + zero1 FINISHED": strategies == ["dp", "zero1"]
            and all(o.get("status") == "FINISHED" for o in outcomes),
            "2 runs FINISHED, 1 parent FINISHED": statuses(children) == ["FINISHED"] * 2
            and parents_said(runs) == "FINISHED",
        },
        "details": {"refusal": refusal[:300], "second_stdout": second.stdout[-300:]},
    }


def resume_after_sigkill(sc: Scene) -> dict[str, Any]:
    s = sc.settings
    sweep_dir = sc.dir / "sweep"
    base = ["-m", "world_size=2", "model=tiny", "workload.num_warmup_steps=1"]
    job2_steps = s.num_steps + 8  # still stepping when it is killed; and rerun whole
    base += [f"workload.num_steps={s.num_steps},{job2_steps}", f"hydra.sweep.dir={sweep_dir}"]
    proc = sc.start_run_py(base)
    try:
        wait_for(
            "job 2 stepping", lambda: (heartbeat_step(sweep_dir / "1", 1) or 0) >= 1, proc, 400
        )
        proc.kill()
        proc.wait()
        killed_at = time.monotonic()
    finally:
        kill_and_reap(proc)
    left = wait_gone(sc.marker, killed_at, s.orphan_wait_s)
    running_after_kill = len(running_runs(store_runs(sc.uri)))
    resumed, _ = sc.run_py([*base, "resume=true"])
    runs = store_runs(sc.uri)
    job2 = runs_of(runs, sweep_dir / "1")
    lost = [r for r in job2 if r.data.tags.get("failure_kind") == LOST]
    rerun = [r for r in job2 if r.data.tags.get(ATTEMPT_TAG) == "2"]
    skipped = outcome_of(sweep_dir / "0").get("status")
    return {
        "fault": "SIGKILL to run.py in job 2 of 2, then the sweep again with resume=true",
        "expected": 3,  # job 1, job 2's killed attempt, job 2's rerun
        "outcome": (
            f"{running_after_kill} RUNNING after the kill; resume exit {resumed.returncode}: "
            f"job 1 {skipped}, job 2 {kinds(job2)}, parents {parents_said(runs)}"
        ),
        "checks": {
            f"ranks gone within {s.orphan_wait_s:g} s": not left,
            "resume exit 0": resumed.returncode == 0,
            "job 1 SKIPPED": skipped == "SKIPPED",
            "killed attempt FAILED orchestrator_lost": len(lost) == 1
            and lost[0].info.status == "FAILED",
            "rerun FINISHED (attempt 2)": statuses(rerun) == ["FINISHED"],
            "killed parent KILLED, resumed FINISHED": parents_said(runs) == "FINISHED,KILLED",
        },
        "details": {
            "running_after_kill": running_after_kill,
            "lost_reason": lost[0].data.tags.get("failure_reason", "")[:300] if lost else None,
        },
    }


def diverged(sc: Scene) -> dict[str, Any]:
    job_dir = sc.dir / "job"
    args = ["model=tiny", "workload.lr=1e6", "workload.num_warmup_steps=0"]
    proc, _ = sc.run_py([*args, "workload.num_steps=5", f"hydra.run.dir={job_dir}"])
    outcome = outcome_of(job_dir)
    runs = job_runs(store_runs(sc.uri))
    tags = runs[0].data.tags if len(runs) == 1 else {}
    progress = job_dir / "progress.jsonl"
    steps_run = len(progress.read_text().splitlines()) if progress.exists() else 0
    return {
        "fault": "workload.lr=1e6 (the loss goes nan)",
        "expected": 1,
        "outcome": (
            f"exit {proc.returncode}, {failure(outcome)} at step "
            f"{outcome.get('diverged_at_step', '?')}, equivalent={tags.get('equivalent', '-')}"
        ),
        "checks": {
            "exit 1": proc.returncode == 1,
            "FAILED diverged": (outcome.get("status"), outcome.get("failure_kind"))
            == ("FAILED", "diverged"),
            "run FAILED diverged, step tagged": statuses(runs) == ["FAILED"]
            and tags.get("failure_kind") == "diverged"
            and bool(tags.get("diverged_at_step")),
            "no equivalence claimed": tags.get("equivalent") != "true",
            "stopped at the nan step": 0 < steps_run < 5,
            "no traceback": "Traceback" not in proc.stdout + proc.stderr,
        },
        "details": {"failure_reason": (outcome.get("failure_reason") or "")[:300]},
    }


def is_object_file(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_text()), dict)
    except (OSError, ValueError):
        return False


def bad_cache(sc: Scene) -> dict[str, Any]:
    cache = sc.dir / "cache"
    cache.mkdir()
    damaged = [cache / "step_parts.json", cache / "reference_losses.json"]
    for path in damaged:
        path.write_text("null")
    sc.extra_env[CACHE_DIR_ENV] = str(cache)
    job_dir = sc.dir / "job"
    args = [*sc.settings.steps(), "hardware.time_source=measured", f"hydra.run.dir={job_dir}"]
    proc, _ = sc.run_py(args)
    outcome = outcome_of(job_dir)
    runs = job_runs(store_runs(sc.uri))
    tags = runs[0].data.tags if len(runs) == 1 else {}
    healed = [p.name for p in damaged if is_object_file(p)]
    return {
        "fault": "`null` in step_parts.json and reference_losses.json",
        "expected": 1,
        "outcome": (
            f"exit {proc.returncode}, {failure(outcome)}, rewritten: {', '.join(healed) or '-'}; "
            f"equivalent={tags.get('equivalent', '-')}"
        ),
        "checks": {
            "exit 0": proc.returncode == 0,
            "FINISHED": outcome.get("status") == "FINISHED" and statuses(runs) == ["FINISHED"],
            "no traceback": "Traceback" not in proc.stdout + proc.stderr,
            "both rewritten as objects": len(healed) == len(damaged),
            "equivalence checked": tags.get("equivalent") == "true",
        },
        "details": {"time_source": tags.get("time_source"), "healed": healed},
    }


def stale_build_lock(sc: Scene) -> dict[str, Any]:
    ext = sc.dir / "ext"
    built = torch_extensions_dir(os.environ)
    if (built / OP).is_dir():  # this venv's built op, copied: the job does not rebuild it
        shutil.copytree(built / OP, ext / OP, ignore=shutil.ignore_patterns("lock"))
    lock = ext / OP / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()  # what a build killed mid-way leaves: the file, no process
    sc.extra_env["TORCH_EXTENSIONS_DIR"] = str(ext)
    job_dir = sc.dir / "job"
    timeout_s = 120 if (ext / OP / f"{OP}.so").exists() else 600  # a build: ~1 min on 2 cores
    args = [*sc.settings.steps(), f"limits.startup_timeout_s={timeout_s}"]
    proc, wall_s = sc.run_py([*args, f"hydra.run.dir={job_dir}"])
    outcome = outcome_of(job_dir)
    said = [line for line in proc.stdout.splitlines() if "stale build lock" in line]
    return {
        "fault": f"{OP}/lock left by a killed build (no owner)",
        "expected": 1,
        "outcome": f"exit {proc.returncode}, {failure(outcome)} in {wall_s:.0f} s; "
        f"{len(said)} line names the lock",
        "checks": {
            "exit 0": proc.returncode == 0,
            "FINISHED": outcome.get("status") == "FINISHED",
            "a line names the lock": any(str(lock) in line for line in said),
            "lock removed": not lock.exists(),
        },
        "details": {"line": said[0][:300] if said else None, "startup_timeout_s": timeout_s},
    }


def readonly_job_dir(sc: Scene) -> dict[str, Any]:
    s = sc.settings
    sweep_dir = sc.dir / "sweep"
    job_dir, away = sweep_dir / "0", sweep_dir / "0.away"
    args = ["-m", "world_size=2", "model=tiny", "workload.num_warmup_steps=1"]
    args += [f"workload.num_steps={s.long_steps}", f"limits.stall_timeout_s={s.stall_timeout_s:g}"]
    proc = sc.start_run_py([*args, f"hydra.sweep.dir={sweep_dir}"])
    try:
        wait_for("rank 1 stepping", lambda: (heartbeat_step(job_dir, 1) or 0) >= 1, proc, 300)
        job_dir.rename(away)  # its mount gone read-only: every path under it fails
        job_dir.write_text("not a directory")
        proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        kill_and_reap(proc)
    ended = store_runs(sc.uri)
    run = runs_of(ended, job_dir)
    tags = run[0].data.tags if len(run) == 1 else {}
    parent_failed = [p.data.tags.get("num_failed") for p in parent_runs(ended)]
    job_dir.unlink()  # the dir comes back
    away.rename(job_dir)
    sync = sc.sync(sweep_dir)
    runs = store_runs(sc.uri)
    written = outcome_of(job_dir)
    return {
        "fault": "job dir unwritable mid-job (swapped for a file), back, then distbench sync",
        "expected": 1,
        "outcome": (
            f"exit {proc.returncode}, run {kinds(run)}, parent {parents_said(ended)} "
            f"num_failed={','.join(map(str, parent_failed))}; sync exit {sync.returncode} → "
            f"{kinds(job_runs(runs))}, outcome.json {written.get('status', 'missing')}"
        ),
        "checks": {
            "run ended FAILED with spool_error": statuses(run) == ["FAILED"]
            and bool(tags.get("spool_error")),
            "parent counts it": parent_failed == ["1"],
            "no false orchestrator_lost": all(
                r.data.tags.get("failure_kind") != LOST for r in job_runs(runs)
            ),
            "outcome.json written back": written.get("status") == "FAILED",
            "no traceback": "Traceback" not in sc.log_tail(50_000),
        },
        "details": {
            "failure_reason": tags.get("failure_reason", "")[:300],
            "spool_error": tags.get("spool_error", "")[:300],
            "sync_output": (sync.stdout + sync.stderr)[-400:],
        },
    }


ISSUE_28_SCENARIOS: dict[str, Callable[[Scene], dict[str, Any]]] = {
    "kill_after_outcome": kill_after_outcome,
    "two_sweeps_one_dir": two_sweeps_one_dir,
    "resume_after_sigkill": resume_after_sigkill,
    "diverged": diverged,
    "bad_cache": bad_cache,
    "stale_build_lock": stale_build_lock,
    "readonly_job_dir": readonly_job_dir,
}
