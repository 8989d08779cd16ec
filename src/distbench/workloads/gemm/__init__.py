"""workload=gemm: C[m, n] = A[m, k] @ B[k, n] split over the ranks in plain torch.distributed
(no model, no strategy). Its schema, checks and option; the rank code is workload.py, the
formulas metrics.py, the sharded step sharding.py.

    python run.py workload=gemm gemm.sharding=k world_size=2
"""

from __future__ import annotations

from dataclasses import dataclass

from distbench.compose.checks import one_of, positive
from distbench.compose.schema import DTYPES, ConfigError, WorkloadConfig
from distbench.job import Job
from distbench.workloads import MetricSpec, WorkloadSpec, common_metrics, register
from distbench.workloads.gemm.metrics import SHARDINGS

GEMM_MODES = ("sharded", "single")
GEMM_TIME_P50 = MetricSpec(
    "gemm_time_s_p50", "s", "min", "GEMM time p50 (s)", ".4f", column="gemm p50 (s)"
)
GEMM_TIME_P90 = MetricSpec("gemm_time_s_p90", "s", "min", "GEMM time p90 (s)", ".4f")


@dataclass
class GemmWorkload(WorkloadConfig):
    """Warm-up iterations (not timed), then timed ones; the dtype is gemm.dtype's."""

    name: str = "gemm"
    num_warmup_steps: int = 2
    num_steps: int = 10
    dtype: str = "${gemm.dtype}"


@dataclass
class GemmConfig:
    """The `gemm` node (distbench.workloads.gemm.metrics has the formulas)."""

    mode: str = "sharded"  # sharded | single (world_size=1: what fits, what sharding needs)
    sharding: str = "rows"  # rows (A by rows) | cols (B by columns) | k (inner dim + all_reduce)
    m: int = 2048
    k: int = 2048
    n: int = 2048
    dtype: str = "fp32"  # fp32 | bf16 | fp16
    check_max_dim: int = 256  # the correctness check runs each dimension capped at this
    plan_world_size: int = 8  # mode=single: memory per rank reported for this many ranks
    mem_cap_gib: float | None = None  # caps the device memory mode=single plans with


def check(job: Job) -> None:
    g, ws = job.options, job.world_size
    one_of("gemm.mode", g.mode, GEMM_MODES)
    one_of("gemm.sharding", g.sharding, SHARDINGS)
    one_of("gemm.dtype", g.dtype, DTYPES)
    for what in ("m", "k", "n", "check_max_dim", "plan_world_size"):
        positive(f"gemm.{what}", getattr(g, what))
    if g.mode == "single" and ws != 1:
        raise ConfigError(f"gemm.mode=single runs on one device, got world_size={ws}")
    dim = {"rows": "m", "cols": "n", "k": "k"}[g.sharding]
    if getattr(g, dim) % ws:
        raise ConfigError(
            f"gemm.{dim}({getattr(g, dim)}) is not divisible by world_size({ws}); "
            f"gemm.sharding={g.sharding} splits {dim} across ranks"
        )


SPEC = register(
    WorkloadSpec(
        name="gemm",
        module=__name__,
        schema=GemmWorkload,
        check=check,
        builds_model=False,
        options_key="gemm",
        options_schema=GemmConfig,
        metrics=(
            common_metrics.TFLOPS_TOTAL,
            common_metrics.TFLOPS_PER_DEVICE,
            common_metrics.MFU,
            common_metrics.PEAK_MEM,
            GEMM_TIME_P50,
            GEMM_TIME_P90,
        ),
    )
)
