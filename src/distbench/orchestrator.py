"""One Hydra job, step by step (the README's "What one run does"):

1. resolve the composed config into a typed Job (distbench.job; a refusal is recorded as a
   FAILED run with failure_kind=invalid_config, never raised);
2. skip it under resume=true when its signature already has a run;
3. write resolved.yaml (the Job's tree) and plan the launch (topology, free port);
4. start the ranks (torchrun / srun / node agents) under the watchdog, with the progress bar;
5. read result.json and let the workload turn it into metrics (and its checks into tags), or
   classify the failure;
6. record: outcome.json, the spooled MLflow run, then MLflow.

The orchestrator never joins a process group and never raises for a failed workload: every
job ends with an outcome (outcome.json in its dir, and an MLflow run when tracking is on).

    python run.py strategy=zero3 world_size=2     # calls run_job() once
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from distbench.compose.checks import tp_spans_nodes
from distbench.compose.hardware import gpu_names, num_cpu_cores
from distbench.compose.schema import ConfigError
from distbench.figures.metrics import check_mfu
from distbench.files import write_json_atomic
from distbench.job import RAW_ENGINE, Job, rank_module, resolve_job
from distbench.launch.topology import SLURM_JOB_ENV, plan_launch, slurm_job_id
from distbench.launch.watchdog import Watchdog
from distbench.launch.workers import remove_shm_leftovers, run_workers, worker_env
from distbench.orphans import mark_owner
from distbench.tracking.live import forget_live, now_ms
from distbench.tracking.pred_history import prior_errors
from distbench.tracking.signature import RESUMED_INTO_TAG_PREFIX, SIGNATURE_TAG, run_signature
from distbench.workloads import Measured, host_metrics, registry

SCHEDULER_STATE_WAIT_S = 5.0
LIVE_START_WAIT_ON_CANCEL_S = 5.0
# Ranks per CPU core beyond which a CPU job is refused (one rank = one core; tests time-share
# up to 4 ranks a core, more only thrashes or exhausts memory).
MAX_RANKS_PER_CPU_CORE = 4


# Set by hydra/launcher=slurm in the job's process: a SIGTERM there comes from SLURM, whose final
# state (CANCELLED, TIMEOUT, PREEMPTED) is known only once the job has exited.
SLURM_LAUNCHER_ENV = "DISTBENCH_SLURM_LAUNCHER"


class JobCancelled(BaseException):
    """SIGTERM reached the orchestrator (scancel, kill, a CI timeout). A BaseException, like
    KeyboardInterrupt, so that nothing on the way swallows it: the job is recorded as
    `cancelled`, then the sweep stops and its parent run is closed."""


def raise_on_sigterm(signum: int, frame: Any) -> None:
    raise JobCancelled(f"signal {signal.Signals(signum).name}")


def sigterm_cause(signal_text: str) -> tuple[str, str]:
    """(failure_kind, reason) of a SIGTERM: inside a SLURM job, what SLURM says ended it (scancel
    → cancelled, its time limit → timeout, preemption → preempted, with the state in the
    reason); anywhere else, or when SLURM does not say, `cancelled`."""
    if SLURM_JOB_ENV not in os.environ:
        return "cancelled", signal_text
    from distbench.launch.slurm_state import slurm_job_state, state_kind, with_slurm_reason

    job_id = slurm_job_id(os.environ)
    try:
        state, slurm_reason = slurm_job_state(job_id)
    except (OSError, subprocess.SubprocessError):  # no scontrol/sacct on this node
        state, slurm_reason = "", ""
    reason = f"{signal_text} from SLURM: job {job_id} {state or 'state unknown'}"
    return state_kind(state, "cancelled"), with_slurm_reason(reason, slurm_reason)


def install_sigterm_handler() -> None:
    """SIGTERM → JobCancelled in the main thread (Python's default would exit without running
    atexit, leaving the sweep's parent RUNNING)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, raise_on_sigterm)


# The tags that name every run (describe / describe_refused), public: users group runs by them.
NAME_TAGS = (
    "strategy",
    "engine",
    "world_size",
    "zero_stage",
    "model",
    "batch",
    "workload",
    "dtype",
    "precision",
    "optimizer_impl",
    "hardware",
    "num_nodes",
    "ranks_per_node",
)
# Outcome entries that become run tags when present (public: users filter on them).
TAGGED_OUTCOME_KEYS = (
    "failure_kind",
    "failure_reason",
    "backend",
    "layout_tag",
    "emulated",
    "mfu_error",
    "equivalent",
    "equivalence_tolerance",
    "world_size_requested",
    "rank_launcher",
    "slurm_job_id",
    "tp_across_nodes",
    "equivalence_note",
    "decode",  # inference: eager or cuda_graph
)
ARTIFACTS = (
    "resolved.yaml",
    "result.json",
    "outcome.json",
    "progress.jsonl",
    "workers.stdout.log",
    "workers.stderr.log",
    "stderr_tail.txt",
)


def describe(job: Job) -> dict[str, str]:
    """The tags that name a job: what users filter and group runs by. A raw torch.distributed
    workload (gemm, collectives) has no strategy: its workload name stands in."""
    raw = not job.builds_model
    return {
        "strategy": job.workload.name if raw else job.strategy.name,
        "engine": job.engine,
        "world_size": str(job.world_size),
        "zero_stage": job.layout.tag,
        "model": "none" if raw else job.model.name,
        "batch": "none" if raw else job.batch.name,
        "workload": job.workload.name,
        "dtype": job.dtype,
        "precision": job.precision,
        **({"optimizer_impl": job.optimizer_impl} if job.optimizer_impl else {}),
        "hardware": job.hardware.name,
        "num_nodes": str(job.topology.num_nodes),
        "ranks_per_node": str(job.topology.ranks_per_node),
    }


def describe_refused(cfg: DictConfig) -> dict[str, str]:
    """The same tags for a config that did not resolve, from what was asked (`invalid` where
    it cannot be told)."""

    def value(path: str) -> str:
        with contextlib.suppress(Exception):  # a missing or unresolvable value names nothing
            found = OmegaConf.select(cfg, path, throw_on_missing=True)
            if found is not None:
                return str(found)
        return "invalid"

    workload = value("workload.name")
    spec = registry().get(workload)
    raw = spec is not None and not spec.builds_model
    return {
        "strategy": workload if raw else value("strategy.name"),
        "engine": RAW_ENGINE if raw else value("strategy.engine"),
        "world_size": value("world_size"),
        "zero_stage": "none" if raw else "invalid",
        "model": "none" if raw else value("model.name"),
        "batch": "none" if raw else value("batch.name"),
        "workload": workload,
        "dtype": value("workload.dtype"),
        "hardware": value("hardware.name"),
        "num_nodes": value("num_nodes"),
        "ranks_per_node": "invalid",
    }


def device_shortfall(device: str, nproc_per_node: int) -> str | None:
    """Why this node cannot host the ranks, or None: more CUDA ranks than visible GPUs, or more
    CPU ranks than MAX_RANKS_PER_CPU_CORE per core."""
    if device != "cuda":
        cores = num_cpu_cores()
        if nproc_per_node > MAX_RANKS_PER_CPU_CORE * cores:
            return (
                f"{nproc_per_node} ranks on this machine's {cores} CPU core(s): at most "
                f"{MAX_RANKS_PER_CPU_CORE * cores} ({MAX_RANKS_PER_CPU_CORE} per core); lower "
                "world_size or use more nodes"
            )
        return None
    num_gpus = len(gpu_names())
    if nproc_per_node > num_gpus:
        return (
            f"nproc_per_node({nproc_per_node}) > the {num_gpus} CUDA device(s) visible here; "
            "lower world_size or use more nodes"
        )
    return None


def job_position() -> tuple[int | None, int | None]:
    """(this job's 1-based number, the sweep's job count) when in a multirun."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None, None  # called as a library (tests, notebooks)
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None, None
    from distbench.tracking.sweep import NUM_JOBS_ENV

    total = os.environ.get(NUM_JOBS_ENV)
    return hydra_cfg.job.num + 1, int(total) if total else None


# What run_name() shows already: a sweep over these needs nothing more in the name.
NAMED_KEYS = ("strategy", "world_size", "zero_stage", "workload")


def swept_values(job_overrides: list[str], swept_keys: list[str]) -> list[str]:
    """`key=value` of each of this job's overrides whose key its sweep varies (as Hydra's
    override_dirname writes them, the last part of a dotted key unless two share it), leaving
    out NAMED_KEYS: `micro_batch_size=4`, `model=tiny`. Secret values are masked."""
    from distbench.tracking.secrets_mask import mask_override

    picked = {}
    for override in job_overrides:
        key, sep, value = mask_override(override).partition("=")
        key = key.lstrip("+~")
        if sep and key in swept_keys and key not in NAMED_KEYS:
            picked[key] = value
    leaves = [key.rsplit(".", 1)[-1] for key in picked]
    return [
        f"{leaf if leaves.count(leaf) == 1 else key}={value}"
        for leaf, (key, value) in zip(leaves, picked.items(), strict=True)
    ]


def sweep_naming() -> tuple[int | None, list[str]]:
    """What tells this job's run from its sweep's others: its 0-based trial number when a
    sampler picks the values (a sweeper with `n_trials`, Optuna: it may draw the same values
    twice), else None; and its swept_values. (None, []) outside a multirun's job."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None, []
    hydra_cfg = HydraConfig.get()
    if OmegaConf.is_missing(hydra_cfg.job, "num"):  # the sweep's process (a launcher), no job
        return None, []
    from distbench.tracking.sweep import SWEPT_KEYS_ENV, trial_budget

    swept_keys = [k for k in os.environ.get(SWEPT_KEYS_ENV, "").split(",") if k]
    trial = hydra_cfg.job.num if trial_budget(hydra_cfg) is not None else None
    return trial, swept_values(list(hydra_cfg.overrides.task), swept_keys)


def run_name(
    tags: dict[str, str], job: Job | None, trial: int | None = None, swept: list[str] | None = None
) -> str:
    """A readable MLflow run name: dp-ws2, zero3-ws4, dp-z2-ws2 (a stage the strategy does not
    imply is named), inference-tp-ws2, gemm-ws2 for raw workloads; then the trial number of a
    sampled sweep and the job's values of the other swept keys (sweep_naming()):
    `zero2-ws2-trial3 micro_batch_size=4,reduce_bucket_size=5000000`, `dp-ws2 model=tiny`."""
    name = strategy_name(tags, job)
    if trial is not None:
        name += f"-trial{trial}"
    return f"{name} {','.join(swept)}" if swept else name


def strategy_name(tags: dict[str, str], job: Job | None) -> str:
    """The name of what ran: dp-ws2, dp-z2-ws2, inference-tp-ws2, gemm-ws2."""
    workload, strategy, ws = tags["workload"], tags["strategy"], tags["world_size"]
    if workload == strategy:  # raw workloads stand in for the strategy
        return f"{workload}-ws{ws}"
    if workload != "train":  # inference: the strategy still says how it is split
        return f"{workload}-{strategy}-ws{ws}"
    own = None
    if job is not None and job.strategy.zero_stage is not None:
        own = str(job.strategy.zero_stage)
    elif job is not None:
        own = str(job.strategy.default_zero_stage)
    stage = tags["zero_stage"]
    named = "" if stage in (own, "none", "invalid") else f"-z{stage}"
    return f"{strategy}{named}-ws{ws}"


def previous_run(tracking: Any, signature: str) -> Any | None:
    """The newest run with this signature (a FINISHED one first), if the store has one."""
    from distbench.tracking.mlflow_store import ensure_experiment, find_runs
    from distbench.tracking.sweep import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking, Path.cwd())
    if uri is None:
        return None
    experiment_id = ensure_experiment(uri, tracking.experiment_name)
    runs = find_runs(uri, experiment_id, {SIGNATURE_TAG: signature})
    finished = [r for r in runs if r.info.status == "FINISHED"]
    return (finished or runs or [None])[0]


def resume_decision(cfg: DictConfig, signature: str) -> tuple[str, Any] | None:
    """(why this job is skipped under resume=true, the earlier run), or None to run it."""
    previous = previous_run(cfg.tracking, signature) if cfg.resume else None
    if previous is None:
        return None
    status, run_id = previous.info.status, previous.info.run_id
    if status == "FINISHED":
        return f"already FINISHED as run {run_id} (signature {signature})", previous
    if status == "FAILED" and not cfg.retry_failed:
        return f"previous run {run_id} FAILED; retry_failed=true reruns it", previous
    return None


def adopt_previous_run(cfg: DictConfig, outcome: dict[str, Any], previous: Any) -> None:
    """A skipped job stands in this sweep by its earlier run: the outcome gets that run's id,
    status and metrics (the summary shows them), and the run a tag naming this sweep's parent
    (the report of this sweep includes it)."""
    from distbench.tracking.mlflow_store import client
    from distbench.tracking.sweep import PARENT_RUN_ENV, resolve_tracking_uri

    outcome["previous_run_id"] = previous.info.run_id
    outcome["previous_status"] = previous.info.status
    outcome["metrics"] = dict(previous.data.metrics)
    for key in ("failure_kind", "failure_reason", "equivalent"):
        if key in previous.data.tags:
            outcome[key] = previous.data.tags[key]
    parent = os.environ.get(PARENT_RUN_ENV)
    uri = resolve_tracking_uri(cfg.tracking, Path.cwd())
    if parent and uri:
        client(uri).set_tag(
            previous.info.run_id, f"{RESUMED_INTO_TAG_PREFIX}{parent}", outcome["job_dir"]
        )


def scheduler_ended(slurm_job_id: str | None) -> tuple[str, str] | None:
    """(failure_kind, reason) when SLURM itself ended this job (its ranks died because of it),
    else None: a job cancelled or over its time limit is not a crash of a rank."""
    if not slurm_job_id:
        return None
    from distbench.launch.slurm_state import scheduler_failure, slurm_job_state

    # The scheduler marks the job before it signals the steps, but scontrol may show RUNNING or
    # COMPLETING for a moment: a failed job waits a few seconds for the final state.
    deadline = time.monotonic() + SCHEDULER_STATE_WAIT_S
    state, slurm_reason = slurm_job_state(slurm_job_id)
    while state.split(" ")[0] in ("RUNNING", "COMPLETING") and time.monotonic() < deadline:
        time.sleep(0.5)
        state, slurm_reason = slurm_job_state(slurm_job_id)
    if not state or state.split(" ")[0] in ("PENDING", "RUNNING", "COMPLETING", "COMPLETED"):
        return None
    return scheduler_failure(state, slurm_reason)


def resolve(cfg: DictConfig, conf_dir: Path, measure: bool = True) -> tuple[Job | None, str | None]:
    """(the Job, None), or (None, why the config cannot run). `measure=False`: no probe of
    this machine starts (job.resolve_job), for a job only checked, shown or recorded."""
    try:
        return resolve_job(cfg, conf_dir, measure), None
    except ConfigError as exc:
        return None, str(exc)
    except OmegaConfBaseException as exc:  # a schema node chosen, an unresolvable ${...}
        return None, config_error_line(exc)


def precheck(cfg: DictConfig, conf_dir: Path) -> str | None:
    """Why a single run cannot start, before anything is launched (run.py exits 2 with it):
    the config's refusal, or ranks this machine cannot host."""
    job, refusal = resolve(cfg, conf_dir, measure=False)
    if job is None:
        return refusal
    local = job.topology.rank_launcher == "local_nodes"
    return device_shortfall(job.device, job.world_size if local else job.topology.ranks_per_node)


def config_error_line(exc: OmegaConfBaseException) -> str:
    """One line for an error OmegaConf raised while the config was read: its message's first
    line and the key it names."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    key = getattr(exc, "full_key", None)
    if key and key not in message:
        message = f"{key}: {message}"
    if "Missing mandatory value" in message:
        message += " (a required value is unset: give it on the command line)"
    return message


def new_outcome(
    cfg: DictConfig, job: Job | None, job_dir: Path, label: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """A job's outcome before it runs (what names it, its signature) and its tags."""
    with contextlib.suppress(OSError):  # an unwritable job dir fails the job later, recorded
        job_dir.mkdir(parents=True, exist_ok=True)
    tags = describe(job) if job else describe_refused(cfg)
    tree = job.tree() if job else _composed_tree(cfg)
    outcome: dict[str, Any] = {
        "job": label,
        "micro_batch_size": job.batch.micro_batch_size if job and job.batch else None,
        "job_dir": str(job_dir),
        "signature": run_signature(tree),
        "run_name": run_name(tags, job, *sweep_naming()),
        **tags,
    }
    if job and job.world_size_requested:
        outcome["world_size_requested"] = job.world_size_requested
    return outcome, tags


def _composed_tree(cfg: DictConfig) -> dict[str, Any]:
    """What was composed, unresolved (a config that did not resolve is recorded as asked)."""
    return OmegaConf.to_container(cfg, resolve=False)


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
    started = time.monotonic()
    job, _ = resolve(cfg, project_dir / "conf", measure=False)
    outcome, _ = new_outcome(cfg, job, job_dir, label)
    outcome.update(status="FAILED", **failure)
    kind, reason = failure["failure_kind"], failure["failure_reason"]
    print(f"distbench: {label} failed ({kind}): {reason}", flush=True)
    return _finish(
        cfg,
        job,
        outcome,
        Measured(metrics={}),
        job_dir,
        project_dir,
        started,
        log_now=log_now,
        times_ms=times_ms,
    )


def run_job(cfg: DictConfig, job_dir: Path, conf_dir: Path, project_dir: Path) -> dict[str, Any]:
    """Run one job end to end and return its outcome (also written to job_dir/outcome.json).
    Whatever raises inside is recorded (failure_kind=orchestrator_error), never raised; a
    SIGTERM or Ctrl-C is recorded as `cancelled` and then raised, to stop the sweep."""
    started = time.monotonic()
    num, total = job_position()
    label = f"job {num}/{total or '?'}" if num else "job"
    try:
        return _run_job(cfg, job_dir, conf_dir, project_dir, label, started)
    except (KeyboardInterrupt, JobCancelled) as exc:
        if isinstance(exc, JobCancelled) and os.environ.get(SLURM_LAUNCHER_ENV):
            raise  # distbench's SLURM launcher records it with the state SLURM ends it in
        kind, why = "cancelled", "Ctrl-C (SIGINT)"
        if isinstance(exc, JobCancelled):
            kind, why = sigterm_cause(str(exc))
        _record_unexpected(cfg, job_dir, project_dir, label, started, kind, why)
        raise
    except Exception as exc:
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
        recorded = _record_unexpected(
            cfg, job_dir, project_dir, label, started, "orchestrator_error", reason
        )
        return recorded or {"status": "FAILED", "failure_kind": "orchestrator_error", "job": label}


def _record_unexpected(
    cfg: DictConfig,
    job_dir: Path,
    project_dir: Path,
    label: str,
    started: float,
    kind: str,
    reason: str,
) -> dict[str, Any] | None:
    """Record a job that an exception or a signal ended: a FAILED run with `kind` and the
    reason, as far as the job dir and the store allow (each step may fail in turn)."""
    print(f"distbench: {label} failed ({kind}): {reason}", flush=True)
    try:
        job, _ = resolve(cfg, project_dir / "conf", measure=False)
    except Exception:
        job = None
    try:
        outcome, _ = new_outcome(cfg, job, job_dir, label)
        outcome.update(status="FAILED", failure_kind=kind, failure_reason=reason[:2000])
        return _finish(cfg, job, outcome, Measured(metrics={}), job_dir, project_dir, started)
    except Exception as exc:  # a read-only job dir, a store gone: say so, keep the sweep going
        print(f"distbench: {label}: could not record the failure ({type(exc).__name__}: {exc})")
        return None


def _run_job(
    cfg: DictConfig, job_dir: Path, conf_dir: Path, project_dir: Path, label: str, started: float
) -> dict[str, Any]:

    # 1-2. resolve (or the refusal), then the resume decision on the job's signature
    job, refusal = resolve(cfg, conf_dir)
    outcome, tags = new_outcome(cfg, job, job_dir, label)
    mark_owner(job_dir)  # a SIGKILLed orchestrator leaves this: `distbench sync` records the job
    forget_live(job_dir)  # an earlier execution's live run is not this attempt
    skipped = _resume_check(cfg, outcome["signature"], label)
    if skipped:
        reason, previous = skipped
        print(f"distbench: {label} skipped: {reason}", flush=True)
        outcome.update(status="SKIPPED", skipped_reason=reason)
        try:
            adopt_previous_run(cfg, outcome, previous)
        except Exception as exc:  # the skip stands; only the link to the earlier run is missing
            print(f"distbench: {label}: could not link run {previous.info.run_id} ({exc})")
        write_json_atomic(job_dir / "outcome.json", outcome)
        return outcome

    def refuse(reason: str) -> dict[str, Any]:
        print(f"distbench: {label}: invalid config: {reason}", flush=True)
        outcome.update(status="FAILED", failure_kind="invalid_config", failure_reason=reason)
        return _finish(cfg, job, outcome, Measured(metrics={}), job_dir, project_dir, started)

    if job is None:
        return refuse(refusal)
    if job.world_size_requested:
        print(
            f"distbench: {label}: strategy=single runs on 1 rank (sweep world_size="
            f"{job.world_size_requested})",
            flush=True,
        )

    # 3. resolved.yaml and the launch plan
    (job_dir / "resolved.yaml").write_text(job.to_yaml())
    try:
        launch = plan_launch(job, job_dir)
    except ConfigError as exc:
        return refuse(str(exc))
    outcome.update(launch.tags())
    if SLURM_JOB_ENV in os.environ:
        outcome["slurm_job_id"] = slurm_job_id(os.environ)
    if tp_spans_nodes(job.layout.tp, launch.ranks_per_node):  # allowed by tp_across_nodes=true
        outcome["tp_across_nodes"] = "true"
        print(
            f"distbench: {label}: warning: tp({job.layout.tp}) groups span nodes "
            f"({launch.ranks_per_node} ranks per node): their all-reduces leave the node"
        )
    shortfall = device_shortfall(job.device, launch.ranks_here)
    if shortfall:
        return refuse(shortfall)

    # 4. the ranks, under the watchdog, their steps streamed to the RUNNING MLflow run
    outcome["master_port"] = launch.port
    # The RUNNING run is created while the ranks start, not before: a store's first connection
    # costs seconds (importing mlflow, opening sqlite) that the ranks' own start-up hides. It
    # streams progress.jsonl from its first line, whenever it starts. The store's address is
    # resolved first: a bad tracking config fails before anything is launched.
    from distbench.tracking.sweep import resolve_tracking_uri

    uri = resolve_tracking_uri(cfg.tracking, Path.cwd())
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-run")
    live_run = pool.submit(_start_live, cfg, uri, outcome, job_dir, project_dir, label, started)
    try:
        launched = _launch(job, launch, job_dir, tags, label)
    finally:  # also when cancelled: the run is then filled as such
        _stop_live(live_run, cancelled=sys.exc_info()[0] is not None, label=label)
        pool.shutdown(wait=False)
    outcome["wall_time_s"] = launched.wall_time_s

    # 5. the result and its metrics, or the failure
    measured = Measured(metrics={})
    if launched.ok:
        result = json.loads((job_dir / "result.json").read_text())
        measured = rank_module(job).measure(job, result, job_dir)
        measured.metrics.update(host_metrics(result))
        # the earlier runs' prediction errors for this (model, strategy, hardware, precision)
        time_source = job.hardware.time_source
        measured.metrics.update(prior_errors(cfg.tracking, tags, measured.metrics, time_source))
        outcome.update(_result_tags(job, result, measured, label))
    else:
        outcome.update(_failure(job, launched, outcome.get("slurm_job_id"), job_dir, label))
    outcome["metrics"] = measured.metrics

    # 6. record
    return _finish(cfg, job, outcome, measured, job_dir, project_dir, started)


def _resume_check(cfg: DictConfig, signature: str, label: str) -> tuple[str, Any] | None:
    try:
        return resume_decision(cfg, signature)
    except Exception as exc:  # an unreachable store must not stop the sweep: run the job
        print(f"distbench: {label}: resume check failed ({type(exc).__name__}); running it")
        return None


def _launch(job: Job, launch: Any, job_dir: Path, tags: dict[str, str], label: str) -> Any:
    """Start the ranks and wait for them, with the progress bar and the watchdog."""
    from distbench.launch.progress import JobProgress

    title = (
        f"{label} strategy={tags['strategy']} world_size={tags['world_size']} "
        f"zero_stage={tags['zero_stage']} model={tags['model']}"
    )
    env = worker_env(job.device, launch.ranks_per_node, num_cpu_cores(), launch.ranks_here)
    watchdog = Watchdog(job_dir, job.world_size, job.limits)
    total_steps = job.workload.num_warmup_steps + job.workload.num_steps
    try:
        with JobProgress(title, total_steps, job_dir / "progress.jsonl") as progress:
            return run_workers(
                job_dir,
                launch.cmd,
                env,
                job.limits.timeout_s,
                on_poll=progress.update,
                watchdog=watchdog.check,
            )
    finally:  # also when cancelled: run_workers has killed the group by then
        remove_shm_leftovers(launch.port)


def _result_tags(
    job: Job, result: dict[str, Any], measured: Measured, label: str
) -> dict[str, Any]:
    """What a finished job adds to its outcome: status, backend, layout, the workload's tags,
    and an impossible MFU turned into the tag mfu_error (the metric is dropped)."""
    out: dict[str, Any] = {"status": "FINISHED", "backend": result["backend"]}
    out["layout"] = job.layout.as_dict()
    out.update(measured.tags)
    peak = getattr(job.hardware, f"peak_tflops_{job.dtype}", None)
    mfu_error = check_mfu(measured.metrics.get("mfu_pct"), peak)
    if mfu_error:  # a wrong peak, not a fast job: say so instead of logging the number
        measured.metrics.pop("mfu_pct")
        out["mfu_error"] = mfu_error
        print(f"distbench: {label}: {mfu_error}")
    if result.get("layout_tag"):  # e.g. dp2-pp1-tp2: the rank grid that ran
        out["layout_tag"] = result["layout_tag"]
    if result.get("emulated"):  # collectives the backend lacks ran as their equivalent
        out["emulated"] = json.dumps(result["emulated"], sort_keys=True)
    return out


def _failure(
    job: Job, launched: Any, slurm_job: str | None, job_dir: Path, label: str
) -> dict[str, Any]:
    """A failed worker group's outcome: its kind (the scheduler's, when SLURM ended it), its
    reason (naming the memory knob on oom) and its stderr tail."""
    ended_by_scheduler = scheduler_ended(slurm_job)
    if ended_by_scheduler:  # srun's step was ended by scancel / the time limit / a node
        launched.failure_kind, launched.failure_reason = ended_by_scheduler
    reason = launched.failure_reason
    knob = job.spec.memory_knob
    if launched.failure_kind == "oom" and knob:
        reason += f" ({knob(job)})"
    (job_dir / "stderr_tail.txt").write_text(launched.stderr_tail)
    print(f"distbench: {label} failed ({launched.failure_kind}): {launched.failure_reason}")
    return {
        "status": "FAILED",
        "failure_kind": launched.failure_kind,
        "failure_reason": reason,
        "returncode": launched.returncode,
    }


def wall_ms(started: float) -> int:
    """The wall clock (ms since the epoch) of the monotonic instant `started`."""
    return int((time.time() - (time.monotonic() - started)) * 1000)


def run_tags(
    outcome: dict[str, Any], job_dir: Path, project_dir: Path, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """A job's run tags from its outcome: what names it, the software and machine, MLflow's
    reserved tags (source, user, commit), its dir and signature, `extra` (the workload's), then
    the outcome's tagged entries."""
    from distbench.compose.hardware import detect_tags
    from distbench.tracking.secrets_mask import mask_text
    from distbench.tracking.spool import JOB_DIR_TAG
    from distbench.tracking.sweep import reserved_tags, software_tags

    tags = {k: str(outcome[k]) for k in NAME_TAGS if k in outcome}
    tags.update(software_tags(project_dir))
    tags.update(reserved_tags(project_dir))
    tags.update(detect_tags())
    tags.update({JOB_DIR_TAG: str(job_dir), SIGNATURE_TAG: outcome["signature"]})
    tags.update(extra or {})
    for key in TAGGED_OUTCOME_KEYS:
        if outcome.get(key):
            tags[key] = mask_text(str(outcome[key]))[:5000]
    return tags


def logged_params(config_tree: dict[str, Any]) -> dict[str, str]:
    """The run's params: the job's tree flattened (it holds only the active workload's node),
    without `fault.*` when no fault is injected; the whole tree stays in resolved.yaml."""
    from distbench.tracking.mlflow_store import flatten

    fault = config_tree.get("fault")
    injected = isinstance(fault, dict) and fault.get("kind") not in (None, "none")
    tree = {k: v for k, v in config_tree.items() if k != "fault" or injected}
    return flatten(tree)


def _stop_live(live_run: Future, cancelled: bool, label: str) -> None:
    """Stop the live run once it has started. A cancelled job waits for its start at most
    LIVE_START_WAIT_ON_CANCEL_S (SIGKILL follows SIGTERM soon): a run that starts later is left
    RUNNING, and `distbench sync` ends it from the job dir."""
    try:
        live = live_run.result(timeout=LIVE_START_WAIT_ON_CANCEL_S if cancelled else None)
        if live is not None:
            live.stop()
    except Exception as exc:  # the job's outcome is recorded at the end all the same
        print(f"distbench: {label}: the live MLflow run was not stopped ({type(exc).__name__})")


def _start_live(
    cfg: DictConfig,
    uri: str | None,
    outcome: dict[str, Any],
    job_dir: Path,
    project_dir: Path,
    label: str,
    started: float,
) -> Any:
    """The job's child run, created RUNNING now and streaming (tracking/live.py), or None
    (tracking off, or the store down: the run is then logged at the end or spooled)."""
    from distbench.tracking.live import start_live_run
    from distbench.tracking.secrets_mask import mask_text
    from distbench.tracking.sweep import PARENT_RUN_ENV

    if uri is None:
        return None
    try:
        return start_live_run(
            uri,
            cfg.tracking.experiment_name,
            outcome["run_name"],
            run_tags(outcome, job_dir, project_dir),
            job_dir,
            wall_ms(started),
            os.environ.get(PARENT_RUN_ENV),
            float(cfg.tracking.get("system_metrics_interval_s") or 0.0),
        )
    except Exception as exc:  # the store is down or broken: the job runs, its run is spooled
        why = mask_text(f"{type(exc).__name__}: {str(exc).strip()[:300]}").splitlines()[0]
        print(f"distbench: {label}: no live MLflow run ({why}); it is logged at the end")
        return None


def stamped_series(
    series: list[tuple[str, float, int]], job_dir: Path
) -> list[tuple[str, float, int] | tuple[str, float, int, int]]:
    """The workload's series, each point of a field rank 0's progress lines carry (step_time_s,
    loss) stamped with the time its step ended (the others are stamped at the end)."""
    from distbench.tracking.live import PROGRESS_FILE, parse_lines, step_timestamps

    try:
        stamps = step_timestamps(parse_lines((job_dir / PROGRESS_FILE).read_text()))
    except OSError:
        stamps = {}
    return [
        (k, v, step, stamps[(k, step)]) if (k, step) in stamps else (k, v, step)
        for k, v, step in series
    ]


def _extra_artifacts(job: Job | None, upload_dir: Path) -> list[Path]:
    """Files a run logs besides the job dir's: the DeepSpeed config a training job's ranks
    passed to deepspeed.initialize (engines/deepspeed.py ds_config), as ds_config.json."""
    if job is None or job.engine != "deepspeed" or job.workload.name != "train":
        return []
    from distbench.engines.deepspeed import ds_config

    path = upload_dir / "ds_config.json"
    path.write_text(json.dumps(ds_config(job), indent=2, sort_keys=True) + "\n")
    return [path]


def _finish(
    cfg: DictConfig,
    job: Job | None,
    outcome: dict[str, Any],
    measured: Measured,
    job_dir: Path,
    project_dir: Path,
    started: float,
    log_now: bool = True,
    times_ms: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Write outcome.json and spool the MLflow run, then log it (unless log_now=False): into
    the run the job created when it started (its attempt, named in the job dir), else a new
    one; a tracking failure is reported (the run stays spooled for `distbench sync`), never
    raised. A job dir that cannot be written (read-only, removed meanwhile) does not lose the
    run: it is logged directly. The run spans the job's wall clock (`times_ms` when given)."""
    from distbench.tracking.live import read_live, read_points
    from distbench.tracking.secrets_mask import mask_text, mask_tree
    from distbench.tracking.spool import upload, write_payload
    from distbench.tracking.sweep import PARENT_RUN_ENV, resolve_tracking_uri

    outcome["orchestrator_time_s"] = time.monotonic() - started
    _write_outcome(job_dir, outcome)
    uri = resolve_tracking_uri(cfg.tracking, Path.cwd())
    if uri is None:
        return outcome
    start_ms, end_ms = times_ms or (wall_ms(started), now_ms())
    # The params: the job's tree (only the active workload's node), or for a config that did
    # not resolve, what was composed.
    config_tree = mask_tree(job.tree() if job else _composed_tree(cfg))
    tags = run_tags(outcome, job_dir, project_dir, extra=measured.tags)
    artifacts = [job_dir / name for name in ARTIFACTS if name != "resolved.yaml"]
    artifacts += measured.artifacts
    live = read_live(job_dir) or {}
    payload = {
        "experiment_name": cfg.tracking.experiment_name,
        "run_name": outcome["run_name"],
        "params": logged_params(config_tree),
        "metrics": measured.metrics,
        "series": stamped_series(measured.series, job_dir),
        "points": read_points(job_dir),
        "tags": tags,
        "artifacts": [],
        "failed": outcome["status"] != "FINISHED",
        "parent_run_id": os.environ.get(PARENT_RUN_ENV),
        "start_time_ms": start_ms,
        "end_time_ms": end_ms,
        **{k: live[k] for k in ("attempt_id", "attempt", "previous_run_id") if live.get(k)},
    }
    try:
        upload_dir = job_dir / "upload"  # what is logged: the config with its secrets masked
        upload_dir.mkdir(exist_ok=True)
        masked_config = upload_dir / "resolved.yaml"
        masked_config.write_text(OmegaConf.to_yaml(OmegaConf.create(config_tree)))
        payload["artifacts"] = [
            str(p.relative_to(job_dir))
            for p in [masked_config, *_extra_artifacts(job, upload_dir), *artifacts]
            if p.is_relative_to(job_dir)
        ]
        write_payload(job_dir, payload)
    except OSError as exc:
        outcome["spool_error"] = f"{type(exc).__name__}: {exc}"[:2000]
        print(f"distbench: cannot spool in {job_dir} ({outcome['spool_error']}); logging directly")
    if not log_now and "spool_error" not in outcome:
        _write_outcome(job_dir, outcome)
        return outcome
    try:
        if "spool_error" in outcome:
            outcome["run_id"] = _log_unspooled(uri, payload, artifacts, outcome["spool_error"])
        else:
            outcome["run_id"] = upload(uri, job_dir)
    except Exception as exc:  # nothing measured is lost: the run is spooled in the job dir
        outcome["tracking_error"] = mask_text(f"{type(exc).__name__}: {exc}")[:2000]
        print(
            f"distbench: could not log to MLflow ({outcome['tracking_error'][:300]}); "
            f"spooled in {job_dir} for `distbench sync`"
        )
    _write_outcome(job_dir, outcome)
    return outcome


def _write_outcome(job_dir: Path, outcome: dict[str, Any]) -> None:
    """outcome.json, unless the job dir cannot be written (the run is then logged directly)."""
    try:
        write_json_atomic(job_dir / "outcome.json", outcome)
    except OSError as exc:
        outcome.setdefault("spool_error", f"{type(exc).__name__}: {exc}"[:2000])


def _log_unspooled(
    uri: str, payload: dict[str, Any], artifacts: list[Path], spool_error: str
) -> str:
    """Log a run whose job dir could not hold its spool: straight to the store, with the job
    dir's files that exist as artifacts and the reason in a `spool_error` tag."""
    from distbench.tracking.mlflow_store import ensure_experiment
    from distbench.tracking.spool import log_payload

    return log_payload(
        uri,
        ensure_experiment(uri, payload["experiment_name"]),
        payload,
        tags={**payload["tags"], "spool_error": spool_error},
        artifacts=[p for p in artifacts if p.is_file()],
    )
