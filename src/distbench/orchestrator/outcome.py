"""A job's outcome, typed: what `run_job` returns and each job dir's outcome.json holds (the
sweep's summary table, `distbench sync` and the parent run's summary read that file). It is built
in one place (`new_outcome`) and filled step by step along the spine; `as_dict()` writes the
JSON keys (an unset entry is left out), `from_dict()` reads them back.

    python -c "from distbench.orchestrator.outcome import Outcome; \\
print(Outcome.from_dict({'job': 'job 1/2', 'status': 'FAILED', 'strategy': 'dp'}))"
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distbench.job import Job
from distbench.orchestrator.naming import NAME_TAGS, describe, run_name, sweep_naming
from distbench.orchestrator.refused import Refused
from distbench.tracking.signature import run_signature


@dataclass(frozen=True)
class JobContext:
    """Where and since when one job runs: its dir, the project's, the label its printed lines
    carry (`job 3/6`) and its start (time.monotonic())."""

    job_dir: Path
    project_dir: Path
    label: str
    started: float


@dataclass
class Outcome:
    """One job's outcome. Field order is outcome.json's key order; `names` (the NAME_TAGS) and
    `workload_tags` (the workload's own entries: measure()'s tags, its result.json tag keys)
    are written as top-level keys where they stand."""

    job: str  # its label: "job 3/6"
    micro_batch_size: int | None = None  # written (null too) for every job that was named
    job_dir: str | None = None
    signature: str | None = None
    run_name: str | None = None
    names: dict[str, str] = field(default_factory=dict)
    world_size_requested: int | None = None  # strategy=single swept at this world size
    rank_launcher: str | None = None
    slurm_job_id: str | None = None
    tp_across_nodes: str | None = None
    master_port: int | None = None
    wall_time_s: float | None = None
    status: str | None = None  # FINISHED | FAILED | SKIPPED
    skipped_reason: str | None = None
    previous_run_id: str | None = None
    previous_status: str | None = None
    backend: str | None = None
    layout: dict[str, Any] | None = None
    workload_tags: dict[str, Any] = field(default_factory=dict)
    mfu_error: str | None = None
    failure_kind: str | None = None
    failure_reason: str | None = None
    returncode: int | None = None
    metrics: dict[str, float] | None = None  # absent for a refused job
    orchestrator_time_s: float | None = None
    spool_error: str | None = None
    run_id: str | None = None
    tracking_error: str | None = None

    def fail(self, kind: str, reason: str) -> None:
        self.status, self.failure_kind, self.failure_reason = "FAILED", kind, reason

    def update(self, entries: Mapping[str, Any]) -> None:
        """Set outcome.json keys: a field by its name, a name tag into `names`, any other key
        (a workload's tag, a failure's extra tag) into `workload_tags`."""
        for key, value in entries.items():
            if key in NAME_TAGS:
                self.names[key] = value
            elif key in _SCALAR_FIELDS:
                setattr(self, key, value)
            else:
                self.workload_tags[key] = value

    def as_dict(self) -> dict[str, Any]:
        """outcome.json's object: the set entries in field order."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("names", "workload_tags"):
                out.update(value)
            elif value is not None or (f.name == "micro_batch_size" and self.names):
                out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Outcome:
        """The Outcome an outcome.json (as_dict()) holds."""
        outcome = cls(job=str(data.get("job", "job")))
        outcome.update({k: v for k, v in data.items() if k != "job"})
        return outcome


_SCALAR_FIELDS = frozenset(
    f.name for f in dataclasses.fields(Outcome) if f.name not in ("names", "workload_tags")
)


def new_outcome(job: Job | Refused, ctx: JobContext) -> Outcome:
    """A job's outcome before it runs: what names it, its signature, its run name (the one
    place an Outcome is built)."""
    with contextlib.suppress(OSError):  # an unwritable job dir fails the job later, recorded
        ctx.job_dir.mkdir(parents=True, exist_ok=True)
    names = describe(job)
    return Outcome(
        job=ctx.label,
        micro_batch_size=job.batch.micro_batch_size if job.batch else None,
        job_dir=str(ctx.job_dir),
        signature=run_signature(job.tree()),
        run_name=run_name(names, job, *sweep_naming()),
        names=names,
        world_size_requested=job.world_size_requested or None,
    )
