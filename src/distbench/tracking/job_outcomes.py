"""A job's outcome.json where its own dir could not give it: the outcomes a job dir could not
hold (read-only, a full disk), kept in this process so that the sweep's end (its table, its
parent run's counts) still counts them; and the outcome of a job killed between spooling its run
and writing outcome.json, written back from the payload (which carries it) by `distbench sync`.

    python -c "from pathlib import Path; from distbench.tracking.job_outcomes import \\
with_unwritten; print(with_unwritten([], Path('multirun/x')))"
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from distbench.files import write_json_atomic
from distbench.tracking.spool import OUTCOME, PAYLOAD, SpoolError, read_payload


def spooled_by_this_execution(job_dir: Path) -> bool:
    """Whether the job dir's payload was spooled by the execution that last ran there (not an
    earlier attempt's): it names the live run's attempt, or it is newer than the owner file."""
    from distbench.orphans import OWNER_FILE
    from distbench.tracking.live import read_live

    try:
        payload = read_payload(job_dir)
    except SpoolError:
        return False
    live = read_live(job_dir)
    if live is not None:
        return payload.get("attempt_id") == live["attempt_id"]
    try:
        return (job_dir / PAYLOAD).stat().st_mtime >= (job_dir / OWNER_FILE).stat().st_mtime
    except OSError:  # no owner file: a job of an older version, the payload is its only record
        return True


def restore_spooled_outcomes(sweep_dir: Path) -> list[Path]:
    """Write back the outcome.json of each job (of a sweep, or the job dir itself) killed
    between spooling its run and writing its outcome, from its payload's `outcome`. Returns the
    job dirs restored."""
    job_dirs = [sweep_dir] if (sweep_dir / PAYLOAD).exists() else sorted(sweep_dir.glob("*"))
    restored = []
    for job_dir in job_dirs:
        path = job_dir / OUTCOME
        if not (job_dir / PAYLOAD).is_file() or path.exists():
            continue
        if not spooled_by_this_execution(job_dir):
            continue
        outcome = read_payload(job_dir).get("outcome")
        if isinstance(outcome, dict):
            with contextlib.suppress(OSError):  # a dir still unwritable: sync it later
                write_json_atomic(path, outcome)
                restored.append(job_dir)
    return restored


# Outcomes that their job dir could not hold (read-only, a full disk) in this process, by job
# dir: the sweep's end (its table, its parent's counts) still counts them.
_UNWRITTEN: dict[str, dict[str, Any]] = {}


def remember_unwritten(job_dir: Path, outcome: dict[str, Any] | None) -> None:
    """Keep (or, with None, forget) the outcome that `job_dir` could not hold."""
    if outcome is None:
        _UNWRITTEN.pop(str(job_dir.absolute()), None)
    else:
        _UNWRITTEN[str(job_dir.absolute())] = outcome


def with_unwritten(outcomes: list[dict[str, Any]], sweep_dir: Path) -> list[dict[str, Any]]:
    """A sweep's outcomes read from its job dirs, plus those its dirs could not hold (this
    process's jobs), in job order (Hydra numbers job dirs 0, 1, 2, ...)."""
    sweep = str(sweep_dir.absolute())
    read = {str(Path(o["job_dir"]).absolute()) for o in outcomes if o.get("job_dir")}
    extra = [o for d, o in _UNWRITTEN.items() if str(Path(d).parent) == sweep and d not in read]
    if not extra:
        return outcomes
    merged = outcomes + extra
    name = [Path(str(o.get("job_dir", ""))).name for o in merged]
    order = sorted(range(len(merged)), key=lambda i: (len(name[i]), name[i]))
    return [merged[i] for i in order]
