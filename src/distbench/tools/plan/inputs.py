"""What a plan starts from: the strategies to plan, the overrides as run.py composes them, the
tags a row's earlier runs are found by, the warnings (a CPU batch for a large model, fp32 on a
GPU), and the plan's hardware as JSON (tools/plan/, `distbench plan`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from distbench.compose.composer import project_dir
from distbench.compose.schema import HardwareConfig
from distbench.figures.metrics import GIB
from distbench.figures.recommend import PREFERENCE
from distbench.probes.parts import Measurements

__all__ = ["project_dir"]  # where conf/ is: compose/composer.py, kept importable from here

# A model this large planned with the CPU-sized default batch says nothing about its training.
LARGE_MODEL_PARAMS = 1e9

# Fields of the plan's hardware JSON (HardwareConfig's, then Measurements') that resolving the
# figures fills in only when it has something to say (hardware=auto's device, a measured peak's
# catalog figures, a failed calibration).
RESOLUTION_NOTES = (
    "detected",
    "catalog_peak_tflops_fp32",
    "catalog_peak_tflops_bf16",
    "catalog_peak_tflops_fp16",
    "peak_calibration_error",
)


def split_strategy_override(overrides: list[str]) -> tuple[list[str], list[str] | None]:
    """`strategy=a,b` among the overrides picks the strategies instead of fixing one."""
    rest, chosen = [], None
    for item in overrides:
        if item.startswith("strategy="):
            chosen = [s for s in item.split("=", 1)[1].split(",") if s]
        else:
            rest.append(item)
    return rest, chosen


def composed_or_why(compose: Any, overrides: list[str]) -> tuple[Any, str | None]:
    """(the composed config, None), or (None, why not) where an override sets a key of
    another engine's strategy schema (e.g. strategy.sequence_parallel on DeepSpeed): a plan
    refuses that row with the reason and goes on. Any other composition error (an unknown
    option, a key no engine has) is raised: the plan stops with it."""
    from dataclasses import fields

    from hydra.errors import ConfigCompositionException

    from distbench.engines import registry

    try:
        return compose(overrides), None
    except ConfigCompositionException as exc:
        # Hydra names the override only in its message ("Could not override 'strategy.x'.")
        key = str(exc).partition("Could not override '")[2].partition("'")[0]
        known = {f.name for spec in registry().values() for f in fields(spec.strategy_schema)}
        if not key.startswith("strategy.") or key.removeprefix("strategy.") not in known:
            raise
        lines = [str(e).splitlines()[0].rstrip(".") for e in (exc, exc.__cause__) if e]
        return None, ": ".join(lines)


def strategy_options(conf_dir: Path) -> list[str]:
    """conf/strategy options, least sharded first (figures.recommend.PREFERENCE), then the rest."""
    names = [p.stem for p in (conf_dir / "strategy").glob("*.yaml")]
    return sorted(names, key=lambda n: (PREFERENCE.index(n) if n in PREFERENCE else 99, n))


def efficiency_model(overrides: list[str], efficiency: float | None) -> list[str]:
    """The overrides, with `hardware.time_source=efficiency` when an efficiency is given and
    the time source is not: an efficiency asked for is the efficiency model, not the measured
    parts that the default (auto) would use on this machine."""
    named = any(o.lstrip("+").startswith("hardware.time_source=") for o in overrides)
    if efficiency is None or named:
        return list(overrides)
    return [*overrides, "hardware.time_source=efficiency"]


def host_mem_gib() -> float | None:
    """This host's memory (/proc/meminfo's MemTotal) in GiB; None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 / GIB
    except OSError:
        return None
    return None


def run_key_tags(job: Any) -> dict[str, str]:
    """The tags (pred_error.KEY_TAGS) a run of this job carries (orchestrator.describe)."""
    from distbench.figures.pred_error import KEY_TAGS
    from distbench.orchestrator import describe

    tags = describe(job)
    return {name: tags[name] for name in KEY_TAGS}


def batch_warnings(job: Any, overrides: list[str]) -> list[str]:
    """Warn when a ≥1B-parameter model is planned with batch=small (seq_len 128), the CPU
    default, unless the user chose the batch: activations, communication per token and the
    recommendation all depend on it."""
    from distbench.ranks.models import count_params

    chose_batch = any(o.split("=", 1)[0].lstrip("+").startswith("batch") for o in overrides)
    num_params = count_params(job.model)["total"]
    if num_params < LARGE_MODEL_PARAMS or chose_batch or job.batch.name != "small":
        return []
    return [
        f"model={job.model.name} has {num_params / 1e9:.1f}B parameters but batch=small "
        f"(micro_batch {job.batch.micro_batch_size}, seq_len {job.batch.seq_len}) is the CPU "
        "default; plan with the batch you will train with, e.g. batch=medium or batch=large "
        "(seq_len 2048)"
    ]


def dtype_warnings(job: Any, overrides: list[str]) -> list[str]:
    """Warn when a GPU is planned in fp32 (the schema's default dtype, right for CPUs) unless
    the user chose the dtype: GPUs train in bf16, at several times fp32's peak."""
    chose_dtype = any(o.lstrip("+").startswith("workload.dtype=") for o in overrides)
    if job.device != "cuda" or job.dtype != "fp32" or chose_dtype:
        return []
    hw = job.hardware
    peaks = ""
    if hw.peak_tflops_fp32 and hw.peak_tflops_bf16:
        peaks = f" ({hw.peak_tflops_fp32:g} TFLOP/s fp32 against {hw.peak_tflops_bf16:g} bf16)"
    return [
        f"planned in fp32 on hardware={hw.name}{peaks}, the default dtype; GPUs train in "
        "bf16: add workload.dtype=bf16 (run.py too)"
    ]


def plan_warnings(job: Any, overrides: list[str]) -> list[str]:
    """What a plan warns about, from its first job: the batch (batch_warnings) and the dtype
    (dtype_warnings)."""
    return batch_warnings(job, overrides) + dtype_warnings(job, overrides)


def hardware_dict(
    hardware: HardwareConfig | None, measured: Measurements | None = None
) -> dict[str, Any]:
    """The plan's hardware as JSON: every figure and measurement (`measured`, one object as
    before Job.measured held them apart), and the resolution notes that are set."""
    if hardware is None:
        return {}
    figures = {**dataclasses.asdict(hardware), **dataclasses.asdict(measured or Measurements())}
    return {
        key: value
        for key, value in figures.items()
        if value is not None or key not in RESOLUTION_NOTES
    }
