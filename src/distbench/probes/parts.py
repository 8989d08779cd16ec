"""What the probes return, typed: `MeasuredParts`, one micro-batch's measured parts
(probes/step_parts.py) and, where an engine was probed, the host work it adds
(workloads/train/engine_probe.py); and `Measurements`, everything measured on this machine that
distbench/prepare.py attaches to a Job before launch (`Job.measured`: the step parts, the
store's link fits, the catalog peak a measured one replaced, why a calibration failed). They are
prediction inputs only: resolved.yaml and the params carry them under `measured`, the
signature leaves them out (tracking/signature.py).

    python -c "from distbench.probes.parts import STEP_PARTS_FIELDS; print(STEP_PARTS_FIELDS)"
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from numbers import Real
from typing import Any


@dataclass(frozen=True)
class MeasuredParts:
    """One micro-batch, forward + backward, on this machine's device (seconds unless named)."""

    micro_batch_gemm_s: float  # its GEMMs, timed at the model's shapes
    micro_batch_attention_s: float  # its fused attention calls, timed at their shapes
    micro_batch_other_s: float  # every other kernel at the measured bandwidth (or its floor)
    micro_batch_host_s: float  # what Python, autograd and the dispatcher cost to launch it
    kernels_per_micro_batch: int
    host_us_per_kernel: float
    kernel_floor_us: float  # the device time of a tiny kernel (0 on a CPU)
    measured_mem_bandwidth_gbps: float  # a large copy, bytes read + written
    # DeepSpeed ZeRO-3's host work beyond the traced model: per micro-batch (its fetch /
    # release hooks) and its optimizer step, at the model's depth; None: not probed
    micro_batch_engine_host_s: float | None = None
    engine_step_s: float | None = None
    # on a CPU: the bare model's micro-batch run whole over the parts as priced, by which the
    # four micro_batch_* parts above are already scaled (probes/step_parts.py); None: not run
    cpu_direct_over_parts: float | None = None

    @classmethod
    def from_figures(cls, figures: dict[str, Any]) -> MeasuredParts:
        """The step parts of a probe's JSON document (extra keys ignored); TypeError or
        KeyError when one is missing or not a number (a damaged cache entry)."""
        values = {name: figures[name] for name in STEP_PARTS_FIELDS}
        bad = sorted(k for k, v in values.items() if not isinstance(v, Real))
        if bad:
            raise TypeError(f"measured parts without a number for {bad}")
        scale = figures.get(CPU_DIRECT_FIELD)
        return cls(**values, cpu_direct_over_parts=scale if isinstance(scale, Real) else None)

    def with_engine(self, engine_host_s: float, engine_step_s: float) -> MeasuredParts:
        return dataclasses.replace(
            self, micro_batch_engine_host_s=engine_host_s, engine_step_s=engine_step_s
        )

    def measured_fields(self) -> dict[str, Any]:
        """Measurements' fields these parts fill (the engine's only when probed)."""
        fields = dataclasses.asdict(self)
        return {k: v for k, v in fields.items() if k in STEP_PARTS_FIELDS or v is not None}


# What `hardware.time_source=measured` fills from the step parts, and from an engine probe.
ENGINE_PARTS_FIELDS = ("micro_batch_engine_host_s", "engine_step_s")
CPU_DIRECT_FIELD = "cpu_direct_over_parts"  # optional: only where a CPU micro-batch was run
# What the micro-batch run whole scales (cpu_direct_over_parts when the parts are measured, the
# post-run re-timing's factor after a run): every time per micro-batch and per kernel.
CPU_DIRECT_SCALED_FIELDS = (
    "micro_batch_gemm_s",
    "micro_batch_attention_s",
    "micro_batch_other_s",
    "micro_batch_host_s",
    "host_us_per_kernel",
)
STEP_PARTS_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(MeasuredParts)
    if f.name not in (*ENGINE_PARTS_FIELDS, CPU_DIRECT_FIELD)
)


def is_step_parts(entry: Any) -> bool:
    """Whether a cache entry holds every step part as a number (else it is measured again)."""
    return isinstance(entry, dict) and all(
        isinstance(entry.get(name), Real) and not isinstance(entry.get(name), bool)
        for name in STEP_PARTS_FIELDS
    )


@dataclass(frozen=True)
class Measurements:
    """What was measured on this machine for one job (None: not measured). The compute term
    reads the parts under hardware.time_source=measured, the links under
    hardware.link_source=measured (figures/step_time.py, figures/communication.py)."""

    # peak_source=measured: the catalog peaks the measured one replaced (in hardware's
    # peak_tflops_<dtype>), or why the calibration failed (then peak_source=catalog)
    catalog_peak_tflops_fp32: float | None = None
    catalog_peak_tflops_bf16: float | None = None
    catalog_peak_tflops_fp16: float | None = None
    peak_calibration_error: str | None = None
    # link_source=measured: the α-β fits of this hardware's collectives runs in the run's own
    # MLflow store (figures/links.py): each tier's bus bandwidth, the intra-node α
    measured_interconnect_gbps: float | None = None
    measured_internode_gbytes_per_s: float | None = None
    link_latency_us: float | None = None
    link_calibration_error: str | None = None
    # time_source=measured: MeasuredParts' fields (a workload's prepare hook fills them)
    micro_batch_gemm_s: float | None = None
    micro_batch_attention_s: float | None = None
    micro_batch_other_s: float | None = None
    micro_batch_host_s: float | None = None
    kernels_per_micro_batch: int | None = None
    host_us_per_kernel: float | None = None
    kernel_floor_us: float | None = None
    measured_mem_bandwidth_gbps: float | None = None
    micro_batch_engine_host_s: float | None = None
    engine_step_s: float | None = None
    cpu_direct_over_parts: float | None = None
    # a run on a CPU predicted from cached parts: its micro-batch run whole once its ranks had
    # exited over the same when the parts were measured, by which the parts are already scaled
    # (workloads/train/prepare.py with_direct_after_run); None: not re-timed
    cpu_direct_after_run_over_cached: float | None = None
    time_calibration_error: str | None = None
    # the CPU cores this machine's ranks share (probes/detect.py num_cpu_cores; a CPU device
    # only): the planner prices ranks × threads beyond them (step_time.cpu_oversubscription)
    host_cores: int | None = None

    def replace(self, **changes: Any) -> Measurements:
        return dataclasses.replace(self, **changes)


# Every field of Measurements: what a resolved.yaml written before `measured` held under
# `hardware` (Job.from_tree moves them over).
MEASUREMENT_FIELDS = tuple(f.name for f in dataclasses.fields(Measurements))
