"""What names a job: the tags users filter and group runs by (NAME_TAGS, `describe`), its run
name (`dp-z2-ws2 micro_batch_size=4`), its label in the sweep (`job 3/6`) and the workload's
own tag keys. Pure, except `job_position` and `sweep_naming`, which read Hydra's job state.

    python -c "from distbench.orchestrator.naming import run_name; \\
print(run_name({'workload': 'gemm', 'strategy': 'gemm', 'world_size': '2'}, None))"
"""

from __future__ import annotations

import os

from omegaconf import OmegaConf

from distbench.job import Job
from distbench.orchestrator.refused import Refused
from distbench.workloads import WorkloadSpec, registry

# The tags that name every run (describe), public: users group runs by them.
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
    "activation_checkpointing",
    "compile",
)
# What run_name() shows already: a sweep over these needs nothing more in the name.
NAMED_KEYS = ("strategy", "world_size", "zero_stage", "workload")


def describe(job: Job | Refused) -> dict[str, str]:
    """The tags that name a job: what users filter and group runs by. A raw torch.distributed
    workload (gemm, collectives) has no strategy: its workload name stands in. A refused config
    is named by what was asked (Refused.names)."""
    if isinstance(job, Refused):
        return dict(job.names)
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
        # a model job's activation checkpointing (none|full|selective) and, for a workload
        # with a `compile` switch, whether it compiles (true|false)
        **({"activation_checkpointing": job.activation_checkpointing} if not raw else {}),
        **_compile_tag(job.workload),
    }


def _compile_tag(workload: object) -> dict[str, str]:
    """{"compile": "true"|"false"} for a workload whose schema has `compile`, else {}."""
    chosen = getattr(workload, "compile", None)
    return {} if chosen is None else {"compile": str(bool(chosen)).lower()}


def workload_tag_keys(job: Job | Refused) -> tuple[str, ...]:
    """The outcome keys of the job's workload that its run is tagged with (WorkloadSpec.tag_keys;
    none for a refused config of an unknown workload)."""
    spec = job.spec
    return tuple(spec.tag_keys) if spec is not None else ()


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


def job_label() -> str:
    """How the job's printed lines name it: `job 3/6` in a multirun (`job 3/?` while the count
    is unknown), else `job`."""
    num, total = job_position()
    return f"job {num}/{total or '?'}" if num else "job"


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
    tags: dict[str, str],
    job: Job | Refused | None,
    trial: int | None = None,
    swept: list[str] | None = None,
) -> str:
    """A readable MLflow run name: dp-ws2, zero3-ws4, dp-z2-ws2 (a stage the strategy does not
    imply is named), inference-tp-ws2, gemm-ws2 for raw workloads; then the trial number of a
    sampled sweep and the job's values of the other swept keys (sweep_naming()):
    `zero2-ws2-trial3 micro_batch_size=4,reduce_bucket_size=5000000`, `dp-ws2 model=tiny`."""
    name = strategy_name(tags, job)
    if trial is not None:
        name += f"-trial{trial}"
    return f"{name} {','.join(swept)}" if swept else name


def strategy_name(tags: dict[str, str], job: Job | Refused | None) -> str:
    """The name of what ran: the workload's run_label (train: dp, dp-z2), else
    `<workload>-<strategy>` (inference-tp), or the workload alone for a raw one (gemm); then
    `-ws<world size>`. A job that did not resolve (a Refused, or None) is named from its tags."""
    workload, strategy, ws = tags["workload"], tags["strategy"], tags["world_size"]
    if workload == strategy:  # raw workloads stand in for the strategy
        return f"{workload}-ws{ws}"
    spec: WorkloadSpec | None = job.spec if job is not None else registry().get(workload)
    if spec is not None and spec.run_label is not None:
        label = spec.run_label(job if isinstance(job, Job) else None, tags)
    else:
        label = f"{workload}-{strategy}"
    return f"{label}-ws{ws}"


def repeat_run_name(name: str, repeat: int) -> str:
    """The run name of one repeat of a config (repeats=N): `dp-ws2 repeat=2`, or the repeat
    after the swept values, `dp-ws2 micro_batch_size=4,repeat=2`."""
    return f"{name},repeat={repeat}" if " " in name else f"{name} repeat={repeat}"


def repeat_label(label: str, repeat: int, repeats: int) -> str:
    """How one repeat's printed lines name it: `job 3/6 repeat 2/3` (the label alone when the
    config runs once)."""
    return label if repeats == 1 else f"{label} repeat {repeat}/{repeats}"
