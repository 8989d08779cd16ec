"""What `distbench sync` reads in a sweep dir besides the spooled runs: whether the dir holds
anything to sync at all, the outcome.json of a job whose dir could not take it when the job
ended (read-only, a full disk: its run was logged directly, its outcome is written back from the
store, so that no later sync takes the job for one whose orchestrator died), and the experiments
its runs went to (where the sweeps a dead process left RUNNING are ended).

    distbench sync multirun/DAY/TIME
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from distbench.files import write_json_atomic
from distbench.orphans import OWNER_FILE, orphaned_job_dirs, owner_gone
from distbench.tracking.live import read_live
from distbench.tracking.spool import INCOMPLETE_TAG, OUTCOME, PAYLOAD


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The job dirs of a sweep dir (or the job dir itself)."""
    if (sweep_dir / OWNER_FILE).exists() or (sweep_dir / PAYLOAD).exists():
        return [sweep_dir]
    return sorted(p for p in sweep_dir.iterdir() if p.is_dir())


def nothing_to_sync(sweep_dir: Path) -> bool:
    """No spooled run and no job whose orchestrator is known dead under `sweep_dir`."""
    spooled = any((d / PAYLOAD).is_file() for d in job_dirs(sweep_dir))
    return not spooled and not orphaned_job_dirs(sweep_dir)


def restore_logged_outcomes(sweep_dir: Path, tracking_uri: str) -> list[Path]:
    """Write the outcome.json of each job whose orchestrator is gone, that has none, and whose
    live run is complete in the store (its dir could not hold its outcome or its spool when it
    ended: the run was logged directly), from that run. Returns the job dirs written."""
    from distbench.tools.summary import outcome_of_run
    from distbench.tracking.mlflow_store import client, retry

    written = []
    for job_dir in job_dirs(sweep_dir):
        live = read_live(job_dir) or {}
        if (job_dir / OUTCOME).exists() or not live.get("run_id") or not owner_gone(job_dir):
            continue
        run_id = str(live["run_id"])
        try:
            run = retry(lambda r=run_id: client(tracking_uri).get_run(r), tracking_uri=tracking_uri)
        except Exception:  # deleted meanwhile, or another store: the job is an orphan
            continue
        if run.info.status == "RUNNING" or INCOMPLETE_TAG in run.data.tags:
            continue  # it never ended: its orchestrator died during the job
        outcome = {**outcome_of_run(run), "job_dir": str(job_dir)}
        for key in ("failure_reason", "spool_error"):
            if run.data.tags.get(key):
                outcome[key] = run.data.tags[key]
        with contextlib.suppress(OSError):  # still unwritable: the next sync tries again
            write_json_atomic(job_dir / OUTCOME, outcome)
            written.append(job_dir)
    return written


def experiment_names(sweep_dir: Path) -> set[str]:
    """The experiments the sweep dir's spooled runs name."""
    names = set()
    for job_dir in job_dirs(sweep_dir):
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            names.add(json.loads((job_dir / PAYLOAD).read_text())["experiment_name"])
    return {n for n in names if isinstance(n, str)}
