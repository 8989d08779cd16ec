"""The measure step: a finished worker group's result.json turned into metrics by the workload's
measure() (plus the host's and the earlier runs' prediction errors) and its tags into the
outcome; a failed group classified (its kind, the scheduler's when SLURM ended it, its reason
naming the memory knob on oom, its stderr tail).

    python -c "from distbench.orchestrator.measuring import result_tag_value; \\
print(result_tag_value({'all_to_all': 'all_gather'}))"
"""

from __future__ import annotations

import json
from typing import Any

from distbench.figures.metrics import check_mfu
from distbench.job import Job, rank_module
from distbench.launch.workers import LaunchOutcome
from distbench.orchestrator.naming import describe
from distbench.orchestrator.outcome import JobContext, Outcome
from distbench.orchestrator.signals import scheduler_ended
from distbench.tracking.pred_history import prior_errors
from distbench.workloads import Measured, host_metrics


def measure_job(job: Job, launched: LaunchOutcome, outcome: Outcome, ctx: JobContext) -> Measured:
    """The job's metrics, series, artifacts and tags (empty for a failed group); the outcome
    gets its status, tags and metrics."""
    measured = Measured(metrics={})
    if launched.ok:
        result = json.loads((ctx.job_dir / "result.json").read_text())
        measured = rank_module(job).measure(job, result, ctx.job_dir)
        measured.metrics.update(host_metrics(result))
        # the earlier runs' prediction errors for this (model, strategy, hardware, precision)
        time_source = job.hardware.time_source
        measured.metrics.update(
            prior_errors(job.tracking, describe(job), measured.metrics, time_source)
        )
        add_result_tags(job, result, measured, outcome, ctx.label)
        if measured.failure:  # the workload's verdict on what completed (train: diverged)
            print(f"distbench: {ctx.label} failed ({measured.failure[0]}): {measured.failure[1]}")
            outcome.fail(*measured.failure)
    else:
        add_failure(job, launched, outcome, ctx)
    outcome.metrics = measured.metrics
    return measured


def add_result_tags(
    job: Job, result: dict[str, Any], measured: Measured, outcome: Outcome, label: str
) -> None:
    """What a finished job adds to its outcome: status, backend, layout, the workload's tags
    (measure()'s, then its result.json tag keys), and an impossible MFU turned into the tag
    mfu_error (the metric is dropped)."""
    outcome.status, outcome.backend = "FINISHED", result["backend"]
    outcome.layout = job.layout.as_dict()
    outcome.update(measured.tags)
    peak = getattr(job.hardware, f"peak_tflops_{job.dtype}", None)
    mfu_error = check_mfu(measured.metrics.get("mfu_pct"), peak)
    if mfu_error:  # a wrong peak, not a fast job: say so instead of logging the number
        measured.metrics.pop("mfu_pct")
        outcome.mfu_error = mfu_error
        print(f"distbench: {label}: {mfu_error}")
    for key in job.spec.tag_keys:  # e.g. train's layout_tag (dp2-pp1-tp2), collectives' emulated
        if result.get(key):
            outcome.update({key: result_tag_value(result[key])})


def result_tag_value(value: Any) -> str:
    """A result.json entry as a tag: a string as it is, anything else as sorted JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def add_failure(job: Job, launched: LaunchOutcome, outcome: Outcome, ctx: JobContext) -> None:
    """A failed worker group's outcome: its kind (the scheduler's, when SLURM ended it), its
    reason (naming the memory knob on oom) and its stderr tail."""
    ended_by_scheduler = scheduler_ended(outcome.slurm_job_id)
    if ended_by_scheduler:  # srun's step was ended by scancel / the time limit / a node
        launched.failure_kind, launched.failure_reason = ended_by_scheduler
    reason = launched.failure_reason
    knob = job.spec.memory_knob
    if launched.failure_kind == "oom" and knob:
        reason += f" ({knob(job)})"
    (ctx.job_dir / "stderr_tail.txt").write_text(launched.stderr_tail)
    print(f"distbench: {ctx.label} failed ({launched.failure_kind}): {launched.failure_reason}")
    outcome.fail(launched.failure_kind, reason)
    outcome.returncode = launched.returncode
