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

from distbench.config import ConfigError, Layout, resolve_zero_stage, validate
from distbench.hardware import num_cpu_cores, resolve_hardware
from distbench.launch import free_port, run_workers, worker_command, worker_env
from distbench.metrics import tokens_per_step, train_flops_per_token, train_metrics
from distbench.models import count_params
from distbench.worker import write_json_atomic

ARTIFACTS = (
    "resolved.yaml",
    "result.json",
    "outcome.json",
    "progress.jsonl",
    "workers.stdout.log",
    "workers.stderr.log",
)


def zero_block(conf_dir: Path, stage: int, extra: dict[str, Any]) -> dict[str, Any]:
    """DeepSpeed's zero_optimization block: conf/ds_zero/<stage>.yaml with `extra` merged over."""
    block = OmegaConf.to_container(OmegaConf.load(conf_dir / "ds_zero" / f"{stage}.yaml"))
    return {**block, **extra, "stage": stage}


def describe(cfg: DictConfig) -> dict[str, str]:
    """The tags that name a job: what users filter and group runs by."""
    try:
        zero_stage = str(resolve_zero_stage(cfg.strategy, cfg.zero_stage))
    except ConfigError:
        zero_stage = "invalid"
    return {
        "strategy": cfg.strategy.name,
        "engine": cfg.strategy.engine,
        "world_size": str(cfg.world_size),
        "zero_stage": zero_stage,
        "model": cfg.model.name,
        "batch": cfg.batch.name,
        "workload": cfg.workload.name,
        "dtype": cfg.workload.dtype,
        "hardware": cfg.hardware.name,
    }


def derive_metrics(resolved: dict[str, Any], layout: Layout, result: dict[str, Any]) -> dict:
    """result.json (raw timings, losses, memory) → the logged metrics with their units."""
    num_warmup = result["num_warmup_steps"]
    model, batch, hw = resolved["model"], resolved["batch"], resolved["hardware"]
    params = count_params(OmegaConf.create(model))
    flops = train_flops_per_token(
        params["matmul"], model["num_layers"], model["hidden_size"], batch["seq_len"]
    )
    num_tokens = tokens_per_step(
        batch["micro_batch_size"], batch["grad_accum_steps"], batch["seq_len"], layout.dp
    )
    metrics = train_metrics(
        step_times_s=result["step_times_s"][num_warmup:],
        losses=result["losses"],
        peak_mem_bytes_per_rank=[r["peak_mem_bytes"] for r in result["ranks"]],
        num_tokens_per_step=num_tokens,
        flops_per_token=flops,
        world_size=layout.world_size,
        peak_tflops_per_device=hw.get(f"peak_tflops_{resolved['workload']['dtype']}"),
        price_usd_per_device_hour=hw["price_usd_per_hour"],
    )
    metrics["init_mem_gib"] = max(r["init_mem_bytes"] for r in result["ranks"]) / 2**30
    metrics["tokens_per_step"] = float(num_tokens)
    metrics["model_flops_per_token"] = flops
    metrics["num_params"] = float(params["total"])
    return metrics


def job_position() -> tuple[int | None, int | None]:
    """(this job's 1-based number, the sweep's job count) when in a multirun."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None, None  # called as a library (tests, notebooks)
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None, None
    total = os.environ.get("DISTBENCH_NUM_JOBS")
    return hydra_cfg.job.num + 1, int(total) if total else None


def run_job(cfg: DictConfig, job_dir: Path, conf_dir: Path, project_dir: Path) -> dict[str, Any]:
    """Run one job end to end and return its outcome (also written to job_dir/outcome.json)."""
    from distbench.progress import JobProgress

    started = time.monotonic()
    job_dir.mkdir(parents=True, exist_ok=True)
    num, total = job_position()
    label = f"job {num}/{total or '?'}" if num else "job"
    tags = describe(cfg)
    outcome: dict[str, Any] = {"job": label, "job_dir": str(job_dir), **tags}
    title = (
        f"{label} strategy={tags['strategy']} world_size={tags['world_size']} "
        f"zero_stage={tags['zero_stage']} model={tags['model']}"
    )
    try:
        layout = validate(cfg)
    except ConfigError as exc:
        print(f"distbench: {label}: invalid config: {exc}", flush=True)
        outcome.update(status="FAILED", failure_kind="invalid_config", failure_reason=str(exc))
        return _finish(cfg, outcome, {}, job_dir, project_dir, started)

    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["hardware"] = resolve_hardware(resolved["hardware"], conf_dir)
    resolved["zero_optimization"] = zero_block(
        conf_dir, layout.zero_stage, resolved["zero_optimization"]
    )
    resolved["zero_stage"] = layout.zero_stage
    resolved["layout"] = layout.as_dict()
    (job_dir / "resolved.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(resolved)))
    tags["hardware"] = resolved["hardware"]["name"]
    outcome["hardware"] = tags["hardware"]

    nproc = cfg.nproc_per_node or cfg.world_size
    device = resolved["hardware"]["device"]
    cmd = worker_command(job_dir, nproc, free_port())
    env = worker_env(device, nproc, num_cpu_cores())
    total_steps = cfg.workload.num_warmup_steps + cfg.workload.num_steps
    with JobProgress(title, total_steps, job_dir / "progress.jsonl") as progress:
        launched = run_workers(job_dir, cmd, env, cfg.limits.timeout_s, on_poll=progress.update)
    outcome["wall_time_s"] = launched.wall_time_s
    metrics: dict[str, float] = {}
    if launched.ok:
        result = json.loads((job_dir / "result.json").read_text())
        metrics = derive_metrics(resolved, layout, result)
        outcome.update(status="FINISHED", backend=result["backend"], layout=layout.as_dict())
        tags["backend"] = result["backend"]
    else:
        outcome.update(
            status="FAILED",
            failure_kind=launched.failure_kind,
            failure_reason=launched.failure_reason,
            returncode=launched.returncode,
        )
        print(f"distbench: {label} failed ({launched.failure_kind}): {launched.failure_reason}")
    outcome["metrics"] = metrics
    return _finish(cfg, outcome, metrics, job_dir, project_dir, started, resolved)


def _finish(
    cfg: DictConfig,
    outcome: dict[str, Any],
    metrics: dict[str, float],
    job_dir: Path,
    project_dir: Path,
    started: float,
    resolved: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write outcome.json, then log the MLflow run; a tracking failure is reported, not raised."""
    from distbench.tracking import (
        PARENT_RUN_ENV,
        ensure_experiment,
        flatten,
        log_child_run,
        resolve_tracking_uri,
        software_tags,
    )

    outcome["orchestrator_time_s"] = time.monotonic() - started
    write_json_atomic(job_dir / "outcome.json", outcome)
    uri = resolve_tracking_uri(cfg.tracking, Path.cwd())
    if uri is None:
        return outcome
    config_tree = resolved or OmegaConf.to_container(cfg, resolve=False)
    tags = {k: str(outcome[k]) for k in describe(cfg) if k in outcome}
    tags.update(software_tags(project_dir))
    tags["distbench.job_dir"] = str(job_dir)
    for key in ("failure_kind", "failure_reason", "backend"):
        if outcome.get(key):
            tags[key] = str(outcome[key])[:5000]
    try:
        experiment_id = ensure_experiment(uri, cfg.tracking.experiment_name)
        run_name = f"{outcome['strategy']}-ws{outcome['world_size']}-z{outcome['zero_stage']}"
        outcome["run_id"] = log_child_run(
            uri,
            experiment_id,
            run_name,
            params=flatten(config_tree),
            metrics=metrics,
            tags=tags,
            artifacts=[job_dir / name for name in ARTIFACTS],
            failed=outcome["status"] != "FINISHED",
            parent_run_id=os.environ.get(PARENT_RUN_ENV),
        )
        outcome["experiment_id"] = experiment_id
    except Exception as exc:  # nothing measured is lost: outcome.json holds it all
        outcome["tracking_error"] = f"{type(exc).__name__}: {exc}"
        print(f"distbench: could not log to MLflow at {uri}: {outcome['tracking_error']}")
    write_json_atomic(job_dir / "outcome.json", outcome)
    return outcome
