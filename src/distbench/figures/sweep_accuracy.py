"""How well a sweep's own runs were predicted, taken together: how many came within the targets
(pred_error.PRED_ERROR_TARGET_PCT), the factor by which the runs' step times were off alike (the
median of measured / predicted), how many come within the target once that common factor is
divided out, and whether the predictions order the runs as they were measured (Spearman's rank
correlation: Spearman 1904, "The proof and measurement of association between two things").

Why the common factor: a machine running below the speed the prediction assumes (a shared VM
whose neighbours take part of each core, benchmarks/cpu_runs/README.md; a GPU held below its
boost clock) moves every run of a sweep alike. That miss is the machine's, and it does not
change which strategy is fastest; what remains after it is the model's error between
strategies, which is what a comparison rests on. Both are shown: the absolute count first.

Printed under the sweep's table (tools/summary.py), logged on the sweep's parent run
(tracking/parent.py: `accuracy_metrics`), listed in the report's "Predicted vs measured".

    python -c "from distbench.figures.sweep_accuracy import *; \
print(sweep_accuracy([(1.0, 1.3), (2.0, 2.7), (3.0, 3.8)], 30.0))"
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from distbench.figures.pred_error import PRED_ERROR_TARGET_PCT, PRED_METRICS, rel_err

# Spearman's ρ needs this many runs to say anything about an order.
MIN_RUNS_FOR_ORDER = 3
# The name a kind of prediction has in the parent's metrics and the printed lines.
KIND_NAMES = {"time": ("step_time", "step time"), "mem": ("peak_mem", "peak memory")}
# The kinds a machine's speed moves alike for every run: the common factor is said for these.
SPEED_KINDS = ("time",)


@dataclass(frozen=True)
class SweepAccuracy:
    """One kind of prediction (step time or peak memory) over a sweep's finished runs."""

    num_runs: int
    target_pct: float
    num_within_target: int  # |predicted / measured − 1| within target_pct
    common_factor: float  # median of measured / predicted: > 1, every run slower than predicted
    num_within_target_after_common: int  # |predicted × common_factor / measured − 1| within it
    rank_corr: float | None  # Spearman's ρ of predicted vs measured; None under 3 runs or ties


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank (Spearman's convention)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            out[i] = (start + end) / 2 + 1
        start = end + 1
    return out


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's ρ: Pearson's correlation of the ranks; None under MIN_RUNS_FOR_ORDER values
    or where one side is all ties (no order to compare)."""
    if len(xs) < MIN_RUNS_FOR_ORDER:
        return None
    rx, ry = ranks(xs), ranks(ys)
    if len(set(rx)) < 2 or len(set(ry)) < 2:
        return None
    return statistics.correlation(rx, ry)


def _within(pred: float, measured: float, target_pct: float) -> bool:
    """The run's relative error (pred_error.rel_err, as runs log it) within target_pct."""
    return abs(rel_err(pred, measured)) * 100.0 <= target_pct


def sweep_accuracy(pairs: Sequence[tuple[float, float]], target_pct: float) -> SweepAccuracy | None:
    """The accuracy of (predicted, measured) pairs, one per run (module docstring); None
    without a pair."""
    pairs = [(p, m) for p, m in pairs if p > 0 and m > 0]
    if not pairs:
        return None
    factor = statistics.median(m / p for p, m in pairs)
    return SweepAccuracy(
        num_runs=len(pairs),
        target_pct=target_pct,
        num_within_target=sum(_within(p, m, target_pct) for p, m in pairs),
        common_factor=factor,
        num_within_target_after_common=sum(_within(p * factor, m, target_pct) for p, m in pairs),
        rank_corr=spearman([p for p, _ in pairs], [m for _, m in pairs]),
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


def metric_pairs(runs: Iterable[dict[str, Any]], kind: str) -> list[tuple[float, float]]:
    """(predicted, measured) of one kind ("time", "mem") from each run's metrics that has both."""
    pred_name, measured_name, _ = PRED_METRICS[kind]
    out = []
    for metrics in runs:
        pred, measured = _number(metrics.get(pred_name)), _number(metrics.get(measured_name))
        if pred is not None and measured is not None:
            out.append((pred, measured))
    return out


def accuracies(runs: Sequence[dict[str, Any]]) -> dict[str, SweepAccuracy]:
    """kind -> the sweep's accuracy, from the finished runs' metrics; kinds no run predicted
    are absent (inference, gemm and collectives jobs predict nothing)."""
    out = {}
    for kind in KIND_NAMES:
        accuracy = sweep_accuracy(metric_pairs(runs, kind), PRED_ERROR_TARGET_PCT[kind])
        if accuracy is not None:
            out[kind] = accuracy
    return out


def accuracy_metrics(runs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The parent run's metrics: per kind `pred_<name>_num_runs`, `..._within_target_frac`,
    `..._rank_corr`, and for step time `..._common_factor` and
    `..._within_target_after_common_factor_frac`."""
    out: dict[str, float] = {}
    for kind, a in accuracies(runs).items():
        prefix = f"pred_{KIND_NAMES[kind][0]}"
        out[f"{prefix}_num_runs"] = float(a.num_runs)
        out[f"{prefix}_within_target_frac"] = a.num_within_target / a.num_runs
        if kind in SPEED_KINDS:
            out[f"{prefix}_common_factor"] = a.common_factor
            out[f"{prefix}_within_target_after_common_factor_frac"] = (
                a.num_within_target_after_common / a.num_runs
            )
        if a.rank_corr is not None:
            out[f"{prefix}_rank_corr"] = a.rank_corr
    return out


def accuracy_line(kind: str, a: SweepAccuracy) -> str:
    """e.g. `predicted step time: 11 of 18 runs within 30 %; measured 1.33× predicted (median
    over the runs), and with that factor divided out 17 of 18 within 30 %; predicted order
    Spearman 0.95` (the common factor for step time only: SPEED_KINDS)."""
    target = f"{a.target_pct:g} %"
    line = (
        f"predicted {KIND_NAMES[kind][1]}: {a.num_within_target} of {a.num_runs} runs within "
        f"{target}"
    )
    if kind in SPEED_KINDS and a.num_runs > 1:
        line += (
            f"; measured {a.common_factor:.2f}× predicted (median over the runs), and with that "
            f"factor divided out {a.num_within_target_after_common} of {a.num_runs} within {target}"
        )
    if a.rank_corr is not None:
        line += f"; predicted order Spearman {a.rank_corr:.2f}"
    return line


def accuracy_lines(runs: Sequence[dict[str, Any]]) -> list[str]:
    """One `accuracy_line` per kind the runs predicted: step time, then peak memory."""
    return [accuracy_line(kind, a) for kind, a in accuracies(runs).items()]
