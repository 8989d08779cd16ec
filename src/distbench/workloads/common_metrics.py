"""The metrics that more than one workload logs, declared once as `MetricSpec`s: the figures of
distbench's shared formulas (distbench/figures/metrics.py: step time, throughput, TFLOP/s, MFU,
cost, memory) and the host's resident set that every job logs (workloads.host_metrics). A
workload lists the ones it logs in its spec's `metrics`, in the order its sweep table shows
them; COMMON_METRICS, first in `workloads.metric_catalog()`, fixes the catalogue's order (the
report's headline order: step time, throughput, TFLOP/s, MFU, memory, cost).

    python -c "from distbench.workloads.common_metrics import *; print(PEAK_MEM)"
"""

from __future__ import annotations

from distbench.workloads import MetricSpec

STEP_TIME_MEAN = MetricSpec(
    "step_time_s_mean", "s", "min", "step time mean (s)", ".3f", step_time=True
)
STEP_TIME_P50 = MetricSpec(
    "step_time_s_p50",
    "s",
    "min",
    "step time p50 (s)",
    ".3f",
    headline=True,
    step_time=True,
    column="step p50 (s)",
)
STEP_TIME_P90 = MetricSpec(
    "step_time_s_p90",
    "s",
    "min",
    "step time p90 (s)",
    ".3f",
    step_time=True,
    column="step p90 (s)",
)
THROUGHPUT = MetricSpec(
    "throughput_tokens_per_s",
    "tokens/s",
    "max",
    "throughput (tokens/s)",
    ",.0f",
    headline=True,
    step_time=True,
    column="tokens/s",
)
TFLOPS_TOTAL = MetricSpec(
    "tflops_total", "TFLOP/s", "max", "TFLOP/s, all devices", ".4f", step_time=True
)
TFLOPS_PER_DEVICE = MetricSpec(
    "tflops_per_device",
    "TFLOP/s",
    "max",
    "TFLOP/s per device",
    ".4f",
    headline=True,
    step_time=True,
    column="TFLOP/s/dev",
)
MFU = MetricSpec(
    "mfu_pct", "%", "max", "MFU (%)", ".2f", headline=True, step_time=True, column="MFU %"
)
PEAK_MEM = MetricSpec(
    "peak_mem_gib",
    "GiB",
    "min",
    "peak memory (GiB)",
    ".2f",
    headline=True,
    column="peak mem (GiB)",
)
COST = MetricSpec(
    "cost_usd_per_1m_tokens",
    "USD",
    "min",
    "cost (USD per 1M tokens)",
    ".4f",
    headline=True,
    step_time=True,
    column="$/1M tok",
)
INIT_MEM = MetricSpec("init_mem_gib", "GiB", "min", "memory after set-up (GiB)", ".2f")
HOST_PEAK_RSS = MetricSpec("host_peak_rss_gib", "GiB", "min", "host peak RSS (GiB)", ".2f")

# The shared vocabulary, in the catalogue's order.
COMMON_METRICS = (
    STEP_TIME_MEAN,
    STEP_TIME_P50,
    STEP_TIME_P90,
    THROUGHPUT,
    TFLOPS_TOTAL,
    TFLOPS_PER_DEVICE,
    MFU,
    PEAK_MEM,
    COST,
    INIT_MEM,
    HOST_PEAK_RSS,
)


# What every job that builds a model logs after its own timing metrics, in table order.
MODEL_RUN_METRICS = (THROUGHPUT, TFLOPS_TOTAL, TFLOPS_PER_DEVICE, MFU, PEAK_MEM, COST, INIT_MEM)
