"""One Hydra job as the README draws it: resolve → resume → prepare → launch → measure → record.

`run_job` never raises for a failed workload and never joins a process group: every job ends
with an outcome (outcome.json in its dir, and an MLflow run when tracking is on). Whatever
raises inside is recorded as `orchestrator_error`; a SIGTERM or Ctrl-C as `cancelled` (or
SLURM's kind), then raised, to stop the sweep. `record_failure` records a job that could not
record itself (SLURM ended it, its orchestrator was killed); `precheck` is run.py's refusal of
a single run before anything starts. With `repeats=N` the prepared job is launched, measured
and recorded N times (orchestrator/repeats.py); each launch is watched for an oversubscribed
host (orchestrator/host_watch.py).

    python run.py strategy=zero3 world_size=2     # calls run_job() once
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from distbench.compose.schema import ConfigError
from distbench.job import Job
from distbench.orchestrator import repeats as repeating
from distbench.orchestrator.host_watch import HostWatch
from distbench.orchestrator.launching import device_shortfall, launch_job, plan_job
from distbench.orchestrator.measuring import measure_job
from distbench.orchestrator.naming import job_label, repeat_label, repeat_run_name
from distbench.orchestrator.outcome import JobContext, Outcome, new_outcome
from distbench.orchestrator.recording import record
from distbench.orchestrator.refused import Refused, refused_job, resolve, resolve_or_refuse
from distbench.orchestrator.resume import resume_job
from distbench.orchestrator.signals import (
    SLURM_LAUNCHER_ENV,
    JobCancelled,
    interruption_cause,
)
from distbench.orphans import mark_owner
from distbench.tracking.live import forget_live
from distbench.workloads import Measured, metric_catalog


def run_job(cfg: DictConfig, job_dir: Path, conf_dir: Path, project_dir: Path) -> dict[str, Any]:
    """Run one job end to end and return its outcome (also written to job_dir/outcome.json).
    Whatever raises inside is recorded (failure_kind=orchestrator_error), never raised; a
    SIGTERM or Ctrl-C is recorded as `cancelled` and then raised, to stop the sweep."""
    ctx = JobContext(job_dir, project_dir, job_label(), time.monotonic())
    job: Job | Refused | None = None
    try:
        job = resolve_or_refuse(cfg, conf_dir)
        repeats, refusal = repeating.repeats_of(cfg)
        if refusal and not isinstance(job, Refused):
            job = refused_job(cfg, refusal)
        return _run(job, ctx, repeats).as_dict()
    except (KeyboardInterrupt, JobCancelled) as exc:
        if isinstance(exc, JobCancelled) and os.environ.get(SLURM_LAUNCHER_ENV):
            raise  # distbench's SLURM launcher records it with the state SLURM ends it in
        if not getattr(exc, "job_recorded", False):  # else its ranks' figures are recorded
            kind, why = interruption_cause(exc)
            _record_unexpected(job, cfg, ctx, kind, why)
        raise
    except Exception as exc:
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
        recorded = _record_unexpected(job, cfg, ctx, _ERROR, reason)
        return (recorded or Outcome(ctx.label, status="FAILED", failure_kind=_ERROR)).as_dict()


_ERROR = "orchestrator_error"


def _run(job: Job | Refused, ctx: JobContext, repeats: int = 1) -> Outcome:
    """The spine: the resolved job (or its refusal) → its recorded outcome (the last repeat's)."""
    outcome = new_outcome(job, ctx)
    mark_owner(ctx.job_dir)  # a SIGKILLed orchestrator leaves this: `distbench sync` records it
    forget_live(ctx.job_dir)  # an earlier execution's live run is not this attempt
    resumed = resume_job(job, outcome, ctx, repeats)  # resume=true: what already ran
    if resumed.skipped:  # the signature has its run (each repeat's)
        return outcome
    if isinstance(job, Refused):
        return _refuse(job, outcome, ctx, job.reason)
    _say_single_rank(job, ctx.label)
    try:
        job = _prepare(job)
        return _repeat(job, outcome, ctx, repeats, resumed.earlier)
    except ConfigError as exc:  # a launch this machine cannot make: refused, in the job dir
        return _refuse(job, outcome, ctx, str(exc))


def _repeat(
    job: Job, outcome: Outcome, ctx: JobContext, repeats: int, ran: dict[int, Outcome]
) -> Outcome:
    """Launch, measure and record the prepared job once for each repeat of 1..N that has not
    run (`ran`: those resume=true found): each in its own dir and run, the last into the job
    dir and `outcome`, with the spread of them all (`ran` included)."""
    if repeats == 1:
        return _attempt(job, outcome, ctx)
    *others, last = repeating.missing_repeats(repeats, ran)
    earlier = [ran[repeat] for repeat in sorted(ran)]
    for repeat in others:
        sub_ctx = _repeat_context(ctx, repeat, repeats, last)
        forget_live(sub_ctx.job_dir)
        sub = new_outcome(job, sub_ctx)
        sub.signature = outcome.signature  # the job's, as resolved (before prepare measured)
        earlier.append(_attempt(job, _as_repeat(sub, repeat), sub_ctx))
    last_ctx = _repeat_context(ctx, last, repeats, last)
    return _attempt(job, _as_repeat(outcome, last), last_ctx, earlier)


def _repeat_context(ctx: JobContext, repeat: int, repeats: int, last: int) -> JobContext:
    """Repeat `repeat` of `repeats`, `last` the last one run here: its dir, its label, its own
    start."""
    return dataclasses.replace(
        ctx,
        job_dir=repeating.repeat_dir(ctx.job_dir, repeat, last),
        label=repeat_label(ctx.label, repeat, repeats),
        started=time.monotonic(),
    )


def _as_repeat(outcome: Outcome, repeat: int) -> Outcome:
    """The outcome of one repeat: tagged `repeat`, named `dp-ws2 repeat=2`."""
    outcome.update({repeating.REPEAT_TAG: str(repeat)})
    outcome.run_name = repeat_run_name(outcome.run_name or "", repeat)
    return outcome


def _attempt(
    job: Job, outcome: Outcome, ctx: JobContext, earlier: list[Outcome] | None = None
) -> Outcome:
    """One launch of the prepared job, measured and recorded; the host watched around its
    ranks; `earlier`: the repeats before this last one, whose spread its run logs."""
    launch = plan_job(job, outcome, ctx)
    watch = HostWatch.begin(ctx.label, launch.ranks_here, outcome)
    launched = launch_job(job, launch, outcome, ctx)
    watch.stop()
    interrupted: BaseException | None = None
    if launched.ok:
        job, interrupted = _measured_after_run(job, ctx)
    measured = measure_job(job, launched, outcome, ctx)
    watch.end(measured, outcome)
    if earlier is not None:
        _add_spread(measured, [*earlier, outcome], ctx.label)
    recorded = record(job, outcome, measured, ctx)
    if interrupted is not None:  # a signal during the post-run probe: recorded, now stop
        interrupted.job_recorded = True  # type: ignore[attr-defined]
        raise interrupted
    return recorded


def _add_spread(measured: Measured, repeats: list[Outcome], label: str) -> None:
    """The spread across the repeats that finished, for each headline metric, into the last
    repeat's metrics; one line with the step time's (or throughput's)."""
    finished = [r.metrics or {} for r in repeats if r.status == "FINISHED"]
    headline = [name for name, spec in metric_catalog().items() if spec.headline]
    measured.metrics.update(repeating.spread_metrics(finished, headline))
    for name in headline:
        line = repeating.spread_line(label, finished, name)
        if line:
            print(line, flush=True)
            return


def _prepare(job: Job) -> Job:
    """What this machine measures for the job (link fits, the workload's prepare hook); what
    only the default time source asks for is read from the cache (probes run in `plan`)."""
    from distbench.prepare import prepare_job

    return prepare_job(job, probe_when_auto=False)


def _measured_after_run(job: Job, ctx: JobContext) -> tuple[Job, BaseException | None]:
    """The job with what its workload measures once its ranks have exited (prepare.
    measured_after_run: train's parts `auto` left unmeasured before launch, or on a CPU its
    micro-batch re-timed); resolved.yaml says what the predictions used. Whatever
    the probe does, what the ranks measured is recorded: a failure keeps the job as it was, a
    SIGTERM or Ctrl-C is returned to be raised once the job is recorded. Not under distbench's
    SLURM launcher, whose time limit and signals belong to the ranks' job."""
    from distbench.prepare import measured_after_run

    if os.environ.get(SLURM_LAUNCHER_ENV):
        return job, None
    try:
        after = measured_after_run(job)
        if after is job:
            return job, None
        written = ctx.job_dir / "resolved.yaml.tmp"
        written.write_text(after.to_yaml())
        os.replace(written, ctx.job_dir / "resolved.yaml")
    except (KeyboardInterrupt, JobCancelled) as exc:
        return job, exc
    except Exception as exc:
        print(f"distbench: {ctx.label}: no measurement after the run ({type(exc).__name__}: {exc})")
        return job, None
    source = after.hardware.time_source
    print(f"distbench: {ctx.label}: predicted after the run with time_source={source}")
    return after, None


def _say_single_rank(job: Job, label: str) -> None:
    if job.world_size_requested:
        print(
            f"distbench: {label}: strategy=single runs on 1 rank (sweep world_size="
            f"{job.world_size_requested})",
            flush=True,
        )


def _refuse(job: Job | Refused, outcome: Outcome, ctx: JobContext, reason: str) -> Outcome:
    """A job refused before launch: a FAILED run, failure_kind=invalid_config, with the reason."""
    print(f"distbench: {ctx.label}: invalid config: {reason}", flush=True)
    outcome.fail("invalid_config", reason)
    return record(job, outcome, Measured(metrics={}), ctx)


def _record_unexpected(
    job: Job | Refused | None, cfg: DictConfig, ctx: JobContext, kind: str, reason: str
) -> Outcome | None:
    """Record a job that an exception or a signal ended: a FAILED run with `kind` and the
    reason, as far as the job dir and the store allow (each step may fail in turn). `cfg` only
    names a job whose resolve itself raised (job None)."""
    print(f"distbench: {ctx.label} failed ({kind}): {reason}", flush=True)
    try:
        if job is None:
            job = refused_job(cfg, reason)
        outcome = new_outcome(job, ctx)
        outcome.fail(kind, reason[:2000])
        return record(job, outcome, Measured(metrics={}), ctx)
    except Exception as exc:  # a read-only job dir, a store gone: say so, keep the sweep going
        print(f"distbench: {ctx.label}: could not record the failure ({type(exc).__name__}: {exc})")
        return None


def record_failure(
    cfg: DictConfig,
    job_dir: Path,
    project_dir: Path,
    failure: dict[str, str],
    label: str,
    log_now: bool = True,
    times_ms: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Record a job that ended before it could record itself (its SLURM job cancelled, timed
    out, or its node lost; its orchestrator killed): a FAILED run with `failure` (failure_kind,
    failure_reason and tags such as slurm_job_id), like any other failure; with log_now=False
    only spooled (`distbench sync` uploads it under the sweep's parent run, filling the run
    the job started, if any). `times_ms`: when the job started and was last seen (else now)."""
    ctx = JobContext(job_dir, project_dir, label, time.monotonic())
    job = resolve_or_refuse(cfg, project_dir / "conf")
    outcome = new_outcome(job, ctx)
    outcome.status = "FAILED"
    outcome.update(failure)
    kind, reason = failure["failure_kind"], failure["failure_reason"]
    print(f"distbench: {label} failed ({kind}): {reason}", flush=True)
    measured = Measured(metrics={})
    return record(job, outcome, measured, ctx, log_now=log_now, times_ms=times_ms).as_dict()


def precheck(cfg: DictConfig, conf_dir: Path) -> str | None:
    """Why a single run cannot start, before anything is launched (run.py exits 2 with it):
    the config's refusal, or ranks this machine cannot host."""
    job, refusal = resolve(cfg, conf_dir)
    if job is None:
        return refusal
    _, bad_repeats = repeating.repeats_of(cfg)
    if bad_repeats:
        return bad_repeats
    local = job.topology.rank_launcher == "local_nodes"
    return device_shortfall(job.device, job.world_size if local else job.topology.ranks_per_node)
