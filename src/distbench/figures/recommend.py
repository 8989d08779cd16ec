"""Which strategy to run: the fastest predicted layout that fits in device memory, and why.

    distbench plan model=llama3_8b world_size=8 hardware=h100_sxm    # prints the recommendation
    python -c "from distbench.figures.recommend import *; print(recommend([]))"

Reads `Prediction`s (figures/predict.py); pure.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from distbench.figures.metrics import GIB

if TYPE_CHECKING:
    from distbench.figures.predict import Prediction

# Order used to break near-ties (within TIE_FRACTION of the fastest): least sharded first,
# the course's "use DDP when it fits, ZeRO when needed, offload last".
PREFERENCE = ("dp", "zero1", "zero2", "tp", "pp", "zero3", "zero2_offload", "zero3_offload")
TIE_FRACTION = 0.02


def recommend(predictions: list[Prediction]) -> tuple[str | None, str]:
    """The fastest predicted strategy among those that fit in device memory, and why.

    The course's rule ("use DDP when the model fits, ZeRO-1/2 when it barely does, ZeRO-3 when
    it needs sharding, more devices or model parallelism beyond") made quantitative: fit is
    the predicted total against the device's memory, and among what fits the predicted
    throughput (tokens/s: layouts with tp or pp have fewer replicas, so step times alone do
    not compare) decides; within TIE_FRACTION of the fastest, the least sharded (PREFERENCE)
    wins. Unknown memory counts as fitting; unknown speed ranks last. None when nothing fits."""
    if not predictions:
        return None, "no strategy validated at this world size"
    fitting = [p for p in predictions if p.fits is not False]
    too_big = sorted(
        (p for p in predictions if p.fits is False), key=lambda p: p.mem.total, reverse=True
    )
    not_fitting = "; ".join(f"{p.strategy} does not fit ({_gib(p.mem.total)} GiB)" for p in too_big)
    if not fitting:
        least = min(predictions, key=lambda p: p.mem.total)
        return None, (
            f"nothing fits: the smallest is {least.strategy} at {_gib(least.mem.total)} of "
            f"{_gib(least.device_mem_bytes)} GiB per device; add devices, or cut "
            "batch.micro_batch_size or batch.seq_len, or recompute activations (--recompute)"
        )
    fastest = min(fitting, key=_s_per_token)
    near = [p for p in fitting if _s_per_token(p) <= _s_per_token(fastest) * (1 + TIE_FRACTION)]
    best = min(near, key=lambda p: (_rank(p.strategy), _s_per_token(p)))
    reason = f"{best.strategy}: fits ({_gib(best.mem.total)} of {_gib(best.device_mem_bytes)} GiB)"
    reason += f" and {_why_fastest(best, fastest)}"
    return best.strategy, reason + (f"; {not_fitting}" if not_fitting else "")


def _why_fastest(best: Prediction, fastest: Prediction) -> str:
    if best.tokens_per_s is None:
        return "no peak FLOP/s is known, so it is the least sharded that fits"
    if best is fastest:
        return (
            f"is fastest among fitting ({best.tokens_per_s:,.0f} tokens/s, "
            f"{best.step_time_s:.3g} s/step)"
        )
    return (
        f"is within {TIE_FRACTION:.0%} of the fastest ({best.tokens_per_s:,.0f} vs "
        f"{fastest.strategy} {fastest.tokens_per_s:,.0f} tokens/s) with less sharding"
    )


def _s_per_token(p: Prediction) -> float:
    return 1.0 / p.tokens_per_s if p.tokens_per_s else math.inf


def _rank(strategy: str) -> int:
    return PREFERENCE.index(strategy) if strategy in PREFERENCE else len(PREFERENCE)


def _gib(num_bytes: float | None) -> str:
    return "?" if num_bytes is None else f"{num_bytes / GIB:.1f}"
