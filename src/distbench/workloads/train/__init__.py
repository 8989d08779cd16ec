"""workload=train: a model wrapped by its strategy's engine, warm-up steps, then timed steps.
Its schema, checks and option; the rank code and the metrics are workload.py.

    python run.py -m strategy=dp,zero3 world_size=2
"""

from __future__ import annotations

from dataclasses import dataclass

from distbench.compose import checks
from distbench.compose.checks import positive
from distbench.compose.schema import ConfigError, WorkloadConfig
from distbench.job import Job
from distbench.workloads import WorkloadSpec, register


@dataclass
class TrainWorkload(WorkloadConfig):
    """Training steps: warm-up steps (not timed), then timed steps."""

    name: str = "train"
    num_warmup_steps: int = 3
    num_steps: int = 10
    dtype: str = "fp32"


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


SPEC = register(
    WorkloadSpec(
        name="train",
        module=__name__,
        schema=TrainWorkload,
        check=check,
        memory_knob=lambda job: f"batch.micro_batch_size={job.batch.micro_batch_size}",
    )
)
