"""workload=train: a model wrapped by its strategy's engine, warm-up steps, then timed steps.
Its schema, checks and option; the rank code and the metrics are workload.py.

    python run.py -m strategy=dp,zero3 world_size=2
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from distbench.compose import checks
from distbench.compose.checks import positive
from distbench.compose.schema import ConfigError, WorkloadConfig
from distbench.job import Job
from distbench.precision import OPTIMIZER_IMPLS, PRECISIONS
from distbench.workloads import WorkloadSpec, common_metrics, register
from distbench.workloads.train import prepare as train_prepare  # a module: its hook below


@dataclass
class TrainWorkload(WorkloadConfig):
    """Training steps: warm-up steps (not timed), then timed steps."""

    name: str = "train"
    num_warmup_steps: int = 3
    num_steps: int = 10
    dtype: str = "fp32"
    # With dtype bf16/fp16: mixed = fp32 master weights and states, low-precision compute;
    # pure = everything in dtype (distbench/precision.py). Tagged `precision` (bf16-mixed, ...).
    precision: str = "mixed"
    optimizer_impl: str = "auto"  # auto (= fused) | fused | foreach | for-loop; tagged
    # N more steps after the timed ones under torch.profiler (not timed): the job dir gets
    # profile.rank0.txt and trace.rank0.json (distbench/ranks/profiling.py).
    profile_steps: int = 0
    # torch.compile per decoder layer (engines/); the first warm-up step compiles, its time
    # beyond a timed step is logged as compile_time_s, never in the timed steps. Tagged.
    compile: bool = False


def check(job: Job) -> None:
    """The model splits over the layout; the batch fits the model's positions."""
    model, batch, layout = job.model, job.batch, job.layout
    checks.model_shape(model, layout.tp, layout.pp)
    positive("batch.micro_batch_size", batch.micro_batch_size)
    positive("batch.grad_accum_steps", batch.grad_accum_steps)
    positive("batch.seq_len", batch.seq_len)
    if batch.seq_len > model.max_position_embeddings:
        raise ConfigError(
            f"batch.seq_len({batch.seq_len}) > model.max_position_embeddings"
            f"({model.max_position_embeddings})"
        )
    checks.no_fp16_on_cpu(job.device, job.dtype)
    if job.workload.profile_steps < 0:
        raise ConfigError(
            f"workload.profile_steps={job.workload.profile_steps} must be >= 0 (0: no profile)"
        )
    check_precision(job)
    if job.workload.compile and job.workload.num_warmup_steps < 1:
        raise ConfigError(
            "workload.compile=true compiles in the first warm-up step, got "
            "workload.num_warmup_steps=0; use workload.num_warmup_steps >= 1"
        )
    if job.hardware.time_source == "auto":  # a bad $DISTBENCH_TIME_SOURCE fails before a run
        train_prepare.env_time_source()


def check_precision(job: Job) -> None:
    """The recipe the engine can run: DeepSpeed keeps fp32 master weights (no pure bf16); the
    torch engine runs no loss scaling (no fp16 mixed)."""
    workload = job.workload
    checks.one_of("workload.precision", workload.precision, PRECISIONS)
    checks.one_of("workload.optimizer_impl", workload.optimizer_impl, OPTIMIZER_IMPLS)
    if job.dtype == "fp32":
        return
    if job.engine == "deepspeed" and workload.precision == "pure":
        raise ConfigError(
            f"workload.precision=pure ({job.dtype} master weights) is not a DeepSpeed recipe: its "
            f"{job.dtype} keeps fp32 master weights and optimizer states; use "
            "workload.precision=mixed, or a torch strategy (single, ddp, fsdp) for pure "
            f"{job.dtype}"
        )
    if job.engine == "torch" and job.dtype == "fp16" and workload.precision == "mixed":
        raise ConfigError(
            "workload.dtype=fp16 workload.precision=mixed needs loss scaling, which the torch "
            "engine does not run; use workload.dtype=bf16, or the deepspeed engine (strategy=dp)"
        )


def run_label(job: Job | None, tags: dict[str, str]) -> str:
    """The run name's strategy part: the strategy, and a ZeRO stage it does not imply (dp-z2;
    zero3 at stage 3 is zero3). A config that did not resolve (job None) names no stage."""
    own = None
    if job is not None:
        stage_set = job.strategy.zero_stage
        own = str(job.strategy.default_zero_stage if stage_set is None else stage_set)
    stage = tags["zero_stage"]
    named = "" if stage in (own, "none", "invalid") else f"-z{stage}"
    return f"{tags['strategy']}{named}"


def artifacts(job: Job, folder: Path) -> list[Path]:
    """ds_config.json: the config a DeepSpeed job's ranks passed to deepspeed.initialize
    (engines/deepspeed.py ds_config); nothing on the torch engine."""
    if job.engine != "deepspeed":
        return []
    from distbench.engines.deepspeed import ds_config

    path = folder / "ds_config.json"
    path.write_text(json.dumps(ds_config(job), indent=2, sort_keys=True) + "\n")
    return [path]


SPEC = register(
    WorkloadSpec(
        name="train",
        module=__name__,
        schema=TrainWorkload,
        check=check,
        memory_knob=lambda job: f"batch.micro_batch_size={job.batch.micro_batch_size}",
        metrics=(
            common_metrics.STEP_TIME_MEAN,
            common_metrics.STEP_TIME_P50,
            common_metrics.STEP_TIME_P90,
            *common_metrics.MODEL_RUN_METRICS,
        ),
        # the rank grid that ran (dp2-pp1-tp2); measure()'s equivalence check; the step a
        # diverged run (failure_kind=diverged) stopped at
        tag_keys=(
            "layout_tag",
            "equivalent",
            "equivalence_tolerance",
            "equivalence_note",
            "diverged_at_step",
        ),
        named_by_strategy=True,  # the strategy group is train's layouts: "dp", not "train/dp"
        batch_tokens=True,
        prepare=train_prepare.prepare,  # time source, measured step parts, ZeRO-3's engine probe
        after_run=train_prepare.after_run,  # parts auto left unmeasured; CPU: micro-batch re-timed
        artifacts=artifacts,  # ds_config.json on DeepSpeed
        run_label=run_label,  # dp, dp-z2
    )
)
