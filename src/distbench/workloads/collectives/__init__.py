"""workload=collectives: nccl-tests' bandwidth sweep in plain torch.distributed (no model, no
strategy). Its schema, checks and option; the rank code is workload.py (ops.py: one function
per collective), the formulas metrics.py, the CSV and plot report.py.

    python run.py -m workload=collectives world_size=2,4
"""

from __future__ import annotations

from dataclasses import dataclass, field

from distbench.compose.checks import one_of, positive
from distbench.compose.schema import DTYPES, ConfigError, WorkloadConfig
from distbench.job import Job
from distbench.workloads import MetricSpec, WorkloadSpec, register
from distbench.workloads.collectives.metrics import COLLECTIVES

EMULATABLE = ("all_gather", "reduce_scatter", "all_to_all")
BUSBW_PEAK_ALL_REDUCE = MetricSpec(
    "busbw_gbps_peak.all_reduce",
    "GB/s",
    "max",
    "all_reduce peak bus bandwidth (GB/s)",
    ".3f",
    column="AR busbw (GB/s)",
)
BUSBW_AVG = MetricSpec(  # nccl-tests' "Avg bus bandwidth" over every collective and size
    "busbw_gbps_avg",
    "GB/s",
    "max",
    "average bus bandwidth (GB/s)",
    ".3f",
    column="avg busbw (GB/s)",
)


@dataclass
class CollectivesWorkload(WorkloadConfig):
    """Per collective and message size: warm-up calls (not timed), then timed calls."""

    name: str = "collectives"
    num_warmup_steps: int = 2
    num_steps: int = 10
    dtype: str = "${collectives.dtype}"


@dataclass
class CollectivesConfig:
    """The `collectives` node: sizes min_bytes * factor^i up to max_bytes."""

    ops: list[str] = field(default_factory=lambda: list(COLLECTIVES))
    min_bytes: int = 1024
    max_bytes: int | None = None  # None: 4 MiB on CPU, 256 MiB on GPU
    factor: int = 2
    dtype: str = "fp32"
    # Collectives to run as their standard equivalent even where the backend has them.
    emulate: list[str] = field(default_factory=list)


def check(job: Job) -> None:
    c = job.options
    for op in c.ops:
        one_of("collectives.ops", op, COLLECTIVES)
    for op in c.emulate:
        one_of("collectives.emulate", op, EMULATABLE)
    one_of("collectives.dtype", c.dtype, DTYPES)
    positive("collectives.min_bytes", c.min_bytes)
    if c.max_bytes is not None and c.max_bytes < c.min_bytes:
        raise ConfigError(
            f"collectives.max_bytes({c.max_bytes}) < collectives.min_bytes({c.min_bytes})"
        )
    if c.factor < 2:
        raise ConfigError(f"collectives.factor={c.factor} must be >= 2 (sizes must grow)")


SPEC = register(
    WorkloadSpec(
        name="collectives",
        module=__name__,
        schema=CollectivesWorkload,
        check=check,
        builds_model=False,
        options_key="collectives",
        options_schema=CollectivesConfig,
        metrics=(BUSBW_PEAK_ALL_REDUCE, BUSBW_AVG),
        tag_keys=("emulated",),  # collectives the backend lacks, run as their equivalent
    )
)
