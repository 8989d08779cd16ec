"""One Hydra job: validate → resolve → launch the worker group → derive metrics → record.

The orchestrator never joins a process group and never raises for a failed workload: every
job ends with an outcome (outcome.json in its dir, and an MLflow run when tracking is on).

    python run.py strategy=zero3 world_size=2     # calls run_job() once
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from distbench.compose.hardware import gpu_names, num_cpu_cores, resolve_hardware
from distbench.compose.schema import (
    RAW_WORKLOADS,
    ConfigError,
    baseline_on_one_device,
    ranks_per_node,
    resolve_num_nodes,
    resolve_zero_stage,
    tp_spans_nodes,
    validate,
)
from distbench.figures import equivalence
from distbench.figures.metrics import check_mfu
from distbench.launch.topology import SLURM_JOB_ENV, plan_launch, slurm_job_id
from distbench.launch.watchdog import Watchdog
from distbench.launch.workers import remove_shm_leftovers, run_workers, worker_env
from distbench.ranks.worker import write_json_atomic
from distbench.tracking.signature import run_signature
from distbench.workloads import Measured, load

SIGNATURE_TAG = "distbench.signature"
SCHEDULER_STATE_WAIT_S = 5.0
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


def zero_block(conf_dir: Path, stage: int, extra: dict[str, Any]) -> dict[str, Any]:
    """DeepSpeed's zero_optimization block: conf/ds_zero/<stage>.yaml with `extra` merged over."""
    block = OmegaConf.to_container(OmegaConf.load(conf_dir / "ds_zero" / f"{stage}.yaml"))
    return {**block, **extra, "stage": stage}


def describe(cfg: DictConfig) -> dict[str, str]:
    """The tags that name a job: what users filter and group runs by. A raw torch.distributed
    workload (gemm, collectives) has no strategy: its workload name stands in."""
    raw = cfg.workload.name in RAW_WORKLOADS
    try:
        no_stage = raw or cfg.strategy.engine != "deepspeed"  # ZeRO is DeepSpeed's
        zero_stage = "none" if no_stage else str(resolve_zero_stage(cfg.strategy, cfg.zero_stage))
    except ConfigError:
        zero_stage = "invalid"
    return {
        "strategy": cfg.workload.name if raw else cfg.strategy.name,
        "engine": "torch.distributed" if raw else cfg.strategy.engine,
        "world_size": str(cfg.world_size),
        "zero_stage": zero_stage,
        "model": "none" if raw else cfg.model.name,
        "batch": "none" if raw else cfg.batch.name,
        "workload": cfg.workload.name,
        "dtype": cfg.workload.dtype,
        "hardware": cfg.hardware.name,
        **topology_tags(cfg),
    }


def topology_tags(cfg: DictConfig) -> dict[str, str]:
    """num_nodes and ranks_per_node as configured (`invalid` when they do not divide)."""
    num_nodes = resolve_num_nodes(cfg)
    fits = num_nodes >= 1 and cfg.world_size % num_nodes == 0
    return {
        "num_nodes": str(num_nodes),
        "ranks_per_node": str(ranks_per_node(cfg)) if fits else "invalid",
    }


def check_equivalence(resolved: dict, metrics: dict[str, float], job_dir: Path) -> dict[str, str]:
    """Compare the first-step loss with the single-device reference: adds the metrics
    loss_first_single and loss_rel_err_vs_single, returns the tags (equivalent=...)."""
    try:
        eq_metrics, eq_tags = equivalence.check(
            resolved, metrics["loss_first"], metrics["num_params"], job_dir
        )
    except Exception as exc:  # the measurement stands; only the check is missing
        return {"equivalent": "unchecked", "equivalence_note": f"reference failed: {exc}"[:500]}
    metrics.update(eq_metrics)
    return eq_tags


def device_shortfall(device: str, nproc_per_node: int) -> str | None:
    """Why this node cannot host the ranks (more CUDA ranks than visible GPUs), or None."""
    if device != "cuda":
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


def run_name(cfg: DictConfig, zero_stage: str) -> str:
    """A readable MLflow run name: dp-ws2, zero3-ws4, dp-z2-ws2 (a stage the strategy does not
    imply is named), inference-tp-ws2, gemm-ws2 for raw workloads."""
    if cfg.workload.name in RAW_WORKLOADS:
        return f"{cfg.workload.name}-ws{cfg.world_size}"
    if cfg.workload.name != "train":  # inference: the strategy still says how it is split
        return f"{cfg.workload.name}-{cfg.strategy.name}-ws{cfg.world_size}"
    pinned, default = cfg.strategy.zero_stage, cfg.strategy.default_zero_stage
    own = str(pinned if pinned is not None else default)
    stage = "" if zero_stage in (own, "none", "invalid") else f"-z{zero_stage}"
    return f"{cfg.strategy.name}{stage}-ws{cfg.world_size}"


def previous_run(cfg: DictConfig, signature: str) -> tuple[str, str] | None:
    """(status, run id) of the newest run with this signature, if the store has one."""
    from distbench.tracking.mlflow_store import ensure_experiment, find_runs
    from distbench.tracking.sweep import resolve_tracking_uri

    uri = resolve_tracking_uri(cfg.tracking, Path.cwd())
    if uri is None:
        return None
    experiment_id = ensure_experiment(uri, cfg.tracking.experiment_name)
    runs = find_runs(uri, experiment_id, {SIGNATURE_TAG: signature})
    finished = [r for r in runs if r.info.status == "FINISHED"]
    newest = (finished or runs or [None])[0]
    return None if newest is None else (newest.info.status, newest.info.run_id)


def resume_decision(cfg: DictConfig, signature: str) -> str | None:
    """Why this job is skipped under resume=true, or None to run it."""
    previous = previous_run(cfg, signature) if cfg.resume else None
    if previous is None:
        return None
    status, run_id = previous
    if status == "FINISHED":
        return f"already FINISHED as run {run_id} (signature {signature})"
    if status == "FAILED" and not cfg.retry_failed:
        return f"previous run {run_id} FAILED; retry_failed=true reruns it"
    return None


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


def new_outcome(
    cfg: DictConfig, job_dir: Path, label: str
) -> tuple[dict[str, Any], dict[str, str], str]:
    """A job's outcome before it runs (what names it), its tags and its signature."""
    job_dir.mkdir(parents=True, exist_ok=True)
    tags = describe(cfg)
    signature = run_signature(OmegaConf.to_container(cfg, resolve=True))
    outcome: dict[str, Any] = {
        "job": label,
        "micro_batch_size": cfg.batch.micro_batch_size,
        "job_dir": str(job_dir),
        "signature": signature,
        "run_name": run_name(cfg, tags["zero_stage"]),
        **tags,
    }
    return outcome, tags, signature


def record_failure(
    cfg: DictConfig,
    job_dir: Path,
    project_dir: Path,
    failure: dict[str, str],
    label: str,
) -> dict[str, Any]:
    """Record a job that ended before it could record itself (its SLURM job cancelled, timed
    out, or its node lost): a FAILED run with `failure` (failure_kind, failure_reason and tags
    such as slurm_job_id), like any other failure."""
    started = time.monotonic()
    cfg, _ = baseline_on_one_device(cfg)
    outcome, _, _ = new_outcome(cfg, job_dir, label)
    outcome.update(status="FAILED", **failure)
    kind, reason = failure["failure_kind"], failure["failure_reason"]
    print(f"distbench: {label} failed ({kind}): {reason}", flush=True)
    return _finish(cfg, outcome, Measured(metrics={}), job_dir, project_dir, started)


def run_job(cfg: DictConfig, job_dir: Path, conf_dir: Path, project_dir: Path) -> dict[str, Any]:
    """Run one job end to end and return its outcome (also written to job_dir/outcome.json)."""
    from distbench.launch.progress import JobProgress

    started = time.monotonic()
    cfg, world_size_requested = baseline_on_one_device(cfg)
    num, total = job_position()
    label = f"job {num}/{total or '?'}" if num else "job"
    outcome, tags, signature = new_outcome(cfg, job_dir, label)
    if world_size_requested:
        outcome["world_size_requested"] = world_size_requested
        print(
            f"distbench: {label}: strategy=single runs on 1 rank (sweep world_size="
            f"{world_size_requested})",
            flush=True,
        )
    title = (
        f"{label} strategy={tags['strategy']} world_size={tags['world_size']} "
        f"zero_stage={tags['zero_stage']} model={tags['model']}"
    )
    try:
        skipped = resume_decision(cfg, signature)
    except Exception as exc:  # an unreachable store must not stop the sweep: run the job
        print(f"distbench: {label}: resume check failed ({type(exc).__name__}); running it")
        skipped = None
    if skipped:
        print(f"distbench: {label} skipped: {skipped}", flush=True)
        outcome.update(status="SKIPPED", skipped_reason=skipped)
        write_json_atomic(job_dir / "outcome.json", outcome)
        return outcome

    def refuse(reason: str) -> dict[str, Any]:
        print(f"distbench: {label}: invalid config: {reason}", flush=True)
        outcome.update(status="FAILED", failure_kind="invalid_config", failure_reason=reason)
        return _finish(cfg, outcome, Measured(metrics={}), job_dir, project_dir, started)

    try:
        layout = validate(cfg)
    except ConfigError as exc:
        return refuse(str(exc))

    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["hardware"] = resolve_hardware(
        resolved["hardware"], conf_dir, dtypes=[resolved["workload"]["dtype"]]
    )
    resolved["zero_optimization"] = zero_block(
        conf_dir, layout.zero_stage, resolved["zero_optimization"]
    )
    resolved["zero_stage"] = layout.zero_stage
    resolved["layout"] = layout.as_dict()
    (job_dir / "resolved.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(resolved)))
    tags["hardware"] = resolved["hardware"]["name"]
    outcome["hardware"] = tags["hardware"]

    try:
        launch = plan_launch(cfg, job_dir)
    except ConfigError as exc:
        return refuse(str(exc))
    tags.update(launch.tags())
    outcome.update(launch.tags())
    if SLURM_JOB_ENV in os.environ:
        outcome["slurm_job_id"] = slurm_job_id(os.environ)
    if tp_spans_nodes(layout.tp, launch.ranks_per_node):  # allowed by tp_across_nodes=true
        outcome["tp_across_nodes"] = "true"
        print(
            f"distbench: {label}: warning: tp({layout.tp}) groups span nodes "
            f"({launch.ranks_per_node} ranks per node): their all-reduces leave the node"
        )
    device = resolved["hardware"]["device"]
    shortfall = device_shortfall(device, launch.ranks_here)
    if shortfall:
        return refuse(shortfall)
    outcome["master_port"] = master_port = launch.port
    cmd = launch.cmd
    env = worker_env(device, launch.ranks_per_node, num_cpu_cores(), launch.ranks_here)
    watchdog = Watchdog(job_dir, cfg.world_size, cfg.limits)
    total_steps = cfg.workload.num_warmup_steps + cfg.workload.num_steps
    with JobProgress(title, total_steps, job_dir / "progress.jsonl") as progress:
        launched = run_workers(
            job_dir,
            cmd,
            env,
            cfg.limits.timeout_s,
            on_poll=progress.update,
            watchdog=watchdog.check,
        )
    remove_shm_leftovers(master_port)
    outcome["wall_time_s"] = launched.wall_time_s
    measured = Measured(metrics={})
    if launched.ok:
        result = json.loads((job_dir / "result.json").read_text())
        measured = load(cfg.workload.name).measure(resolved, layout, result)
        dtype = resolved["workload"]["dtype"]
        mfu_error = check_mfu(
            measured.metrics.get("mfu_pct"), resolved["hardware"].get(f"peak_tflops_{dtype}")
        )
        if mfu_error:  # a wrong peak, not a fast job: say so instead of logging the number
            measured.metrics.pop("mfu_pct")
            outcome["mfu_error"] = mfu_error
            print(f"distbench: {label}: {mfu_error}")
        if cfg.workload.name == "train":
            outcome.update(check_equivalence(resolved, measured.metrics, job_dir))
        outcome.update(status="FINISHED", backend=result["backend"], layout=layout.as_dict())
        if result.get("layout_tag"):  # e.g. dp2-pp1-tp2: the rank grid that ran
            outcome["layout_tag"] = result["layout_tag"]
        if result.get("emulated"):  # collectives the backend lacks ran as their equivalent
            outcome["emulated"] = json.dumps(result["emulated"], sort_keys=True)
    else:
        ended_by_scheduler = scheduler_ended(outcome.get("slurm_job_id"))
        if ended_by_scheduler:  # srun's step was ended by scancel / the time limit / a node
            launched.failure_kind, launched.failure_reason = ended_by_scheduler
        reason = launched.failure_reason
        if launched.failure_kind == "oom" and cfg.workload.name == "train":
            reason += f" (batch.micro_batch_size={cfg.batch.micro_batch_size})"
        outcome.update(
            status="FAILED",
            failure_kind=launched.failure_kind,
            failure_reason=reason,
            returncode=launched.returncode,
        )
        (job_dir / "stderr_tail.txt").write_text(launched.stderr_tail)
        print(f"distbench: {label} failed ({launched.failure_kind}): {launched.failure_reason}")
    outcome["metrics"] = measured.metrics
    return _finish(cfg, outcome, measured, job_dir, project_dir, started, resolved)


def _finish(
    cfg: DictConfig,
    outcome: dict[str, Any],
    measured: Measured,
    job_dir: Path,
    project_dir: Path,
    started: float,
    resolved: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write outcome.json and spool the MLflow run, then log it; a tracking failure is reported
    (the run stays spooled for `distbench sync`), never raised."""
    from distbench.compose.hardware import detect_tags
    from distbench.tracking.mlflow_store import flatten
    from distbench.tracking.secrets_mask import mask_text, mask_tree
    from distbench.tracking.spool import JOB_DIR_TAG, upload, write_payload
    from distbench.tracking.sweep import PARENT_RUN_ENV, resolve_tracking_uri, software_tags

    outcome["orchestrator_time_s"] = time.monotonic() - started
    write_json_atomic(job_dir / "outcome.json", outcome)
    uri = resolve_tracking_uri(cfg.tracking, Path.cwd())
    if uri is None:
        return outcome
    config_tree = mask_tree(resolved or OmegaConf.to_container(cfg, resolve=False))
    tags = {k: str(outcome[k]) for k in describe(cfg) if k in outcome}
    tags.update(software_tags(project_dir))
    tags.update(detect_tags())
    tags.update({JOB_DIR_TAG: str(job_dir), SIGNATURE_TAG: outcome["signature"]})
    for key in TAGGED_OUTCOME_KEYS:
        if outcome.get(key):
            tags[key] = mask_text(str(outcome[key]))[:5000]
    upload_dir = job_dir / "upload"  # what is logged: the config with its secrets masked
    upload_dir.mkdir(exist_ok=True)
    (upload_dir / "resolved.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(config_tree)))
    artifacts = [upload_dir / "resolved.yaml"]
    artifacts += [job_dir / name for name in ARTIFACTS if name != "resolved.yaml"]
    artifacts += measured.artifacts
    write_payload(
        job_dir,
        {
            "experiment_name": cfg.tracking.experiment_name,
            "run_name": outcome["run_name"],
            "params": flatten(config_tree),
            "metrics": measured.metrics,
            "series": measured.series,
            "tags": tags,
            "artifacts": [
                str(p.relative_to(job_dir)) for p in artifacts if p.is_relative_to(job_dir)
            ],
            "failed": outcome["status"] != "FINISHED",
            "parent_run_id": os.environ.get(PARENT_RUN_ENV),
        },
    )
    try:
        outcome["run_id"] = upload(uri, job_dir)
    except Exception as exc:  # nothing measured is lost: the run is spooled in the job dir
        outcome["tracking_error"] = mask_text(f"{type(exc).__name__}: {exc}")[:2000]
        print(
            f"distbench: could not log to MLflow ({outcome['tracking_error'][:300]}); "
            f"spooled in {job_dir} for `distbench sync`"
        )
    write_json_atomic(job_dir / "outcome.json", outcome)
    return outcome
