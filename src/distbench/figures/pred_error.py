"""How far the planner's predictions have been from what the runs measured: per (model,
strategy, ZeRO stage, hardware, precision), the median relative error of each prediction over
the finished runs in the MLflow store, its spread and n. That is the error bar `distbench plan`
shows next to a prediction (`--calibrated` divides it out), and the prior every new run logs
beside its own error (`mem_pred_rel_err_prior`, ...): calibrated from the store, not constants.

    distbench plan model=tiny world_size=2 hardware=cpu    # step s: 0.612 (+12 % ±4 %, n=3)
    distbench plan --calibrated model=tiny world_size=2 hardware=cpu
    python -c "from distbench.figures.pred_error import *; print(error_bar([0.1, 0.3, 0.2]).label)"

Pure functions of runs already read (MLflow Run objects, or anything with `.info.status`,
`.info.start_time`, `.data.tags`, `.data.metrics`); tracking/pred_history.py reads the store.

- relative error = (predicted − measured) / measured, as `figures.predict.pred_vs_measured` logs it
  (`mem_pred_rel_err` against `peak_mem_gib`, `time_pred_rel_err` against `step_time_s_p50`;
  recomputed from the pred_* metric where an older run did not log it).
- the error bar of n runs: their median (one odd run does not move it) and the median absolute
  deviation from it (MAD; Hampel 1974, "The influence curve and its role in robust
  estimation", JASA 69(346)), over the newest MAX_RUNS_PER_KEY runs only, so that the bar
  follows the model as it is corrected instead of averaging over every version of it.
- calibrated prediction = pred / (1 + median): what the median error says the run will measure.
- world size, batch and micro-batch are pooled within a key: their effect is in the spread.
- a step-time bar counts only the runs whose time was predicted the same way (their param
  `hardware.time_source`, `efficiency` for runs older than it): measured parts and the
  efficiency model miss differently, and `time_source=auto` picks by machine.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Issue 13's targets, |error| in %: the report shades them, plan_vs_measured counts against them.
PRED_ERROR_TARGET_PCT = {"mem": 15.0, "time": 30.0}
# kind -> (predicted metric, measured metric, relative-error metric), as runs log them.
PRED_METRICS: dict[str, tuple[str, str, str]] = {
    "mem": ("pred_peak_mem_gib", "peak_mem_gib", "mem_pred_rel_err"),
    "time": ("pred_step_time_s", "step_time_s_p50", "time_pred_rel_err"),
}
# The run tags (orchestrator.describe) that say which predictions are alike.
KEY_TAGS = ("model", "strategy", "zero_stage", "hardware", "precision")
# The param that says how a run's step time was predicted (runs older than it: efficiency).
TIME_SOURCE_PARAM = "hardware.time_source"
# Newest runs per key that make an error bar: enough for a median and its spread, few enough
# that runs predicted by an older version of the model drop out.
MAX_RUNS_PER_KEY = 20

PredKey = tuple[str, ...]


@dataclass(frozen=True)
class ErrorBar:
    """The observed relative error of one prediction: median, MAD around it, runs."""

    median_rel_err: float
    spread_rel_err: float
    num_runs: int

    @property
    def label(self) -> str:
        """e.g. `+18 % ±6 %, n=4` (positive: the prediction was too high)."""
        return (
            f"{100 * self.median_rel_err:+.0f} % ±{100 * self.spread_rel_err:.0f} %, "
            f"n={self.num_runs}"
        )

    def as_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)


def rel_err(pred: float | None, measured: float | None) -> float | None:
    """(pred − measured) / measured; None without both or with a measurement of 0."""
    if pred is None or not measured or math.isnan(pred) or math.isnan(measured):
        return None
    return (pred - measured) / measured


def run_rel_errs(metrics: Mapping[str, float]) -> dict[str, float]:
    """kind -> one run's relative error: its logged `*_pred_rel_err`, else recomputed from its
    pred_* and measured metrics; kinds it cannot tell are absent."""
    out = {}
    for kind, (pred, measured, err) in PRED_METRICS.items():
        value = metrics.get(err)
        if value is None or math.isnan(value):
            value = rel_err(metrics.get(pred), metrics.get(measured))
        if value is not None:
            out[kind] = float(value)
    return out


def pred_key(tags: Mapping[str, str]) -> PredKey | None:
    """The KEY_TAGS values of a run (or of a job's describe()); None when one is missing."""
    values = tuple(tags.get(name) for name in KEY_TAGS)
    return None if any(v is None for v in values) else values  # type: ignore[return-value]


def error_bar(rel_errs: Sequence[float]) -> ErrorBar:
    """Median and median absolute deviation of relative errors (module docstring)."""
    if not rel_errs:
        raise ValueError("an error bar needs at least one relative error")
    median = statistics.median(rel_errs)
    spread = statistics.median(abs(e - median) for e in rel_errs)
    return ErrorBar(median_rel_err=median, spread_rel_err=spread, num_runs=len(rel_errs))


def run_time_source(run: Any) -> str:
    """How a run's step time was predicted: its TIME_SOURCE_PARAM, `efficiency` before it."""
    params = getattr(run.data, "params", None) or {}
    return params.get(TIME_SOURCE_PARAM) or "efficiency"


def error_bars(
    runs: Iterable[Any],
    max_runs_per_key: int = MAX_RUNS_PER_KEY,
    time_source: str | None = None,
) -> dict[PredKey, dict[str, ErrorBar]]:
    """key -> kind -> ErrorBar over the FINISHED runs that have that kind's error, the newest
    `max_runs_per_key` of each key and kind; with `time_source`, the step-time bar counts only
    the runs predicted by it (run_time_source)."""
    errs: dict[PredKey, dict[str, list[tuple[int, float]]]] = {}
    for run in runs:
        key = pred_key(run.data.tags)
        if run.info.status != "FINISHED" or key is None:
            continue
        for kind, value in run_rel_errs(run.data.metrics).items():
            if kind == "time" and time_source not in (None, run_time_source(run)):
                continue
            errs.setdefault(key, {}).setdefault(kind, []).append((run.info.start_time or 0, value))
    return {
        key: {
            kind: error_bar([v for _, v in sorted(pairs, reverse=True)[:max_runs_per_key]])
            for kind, pairs in by_kind.items()
        }
        for key, by_kind in errs.items()
    }


def calibrate(value: float, bar: ErrorBar) -> float:
    """What the run is expected to measure: pred / (1 + median relative error)."""
    return value / (1.0 + bar.median_rel_err)


def with_error(text: str, bar: ErrorBar | None) -> str:
    """A formatted prediction with its error bar when there is one: `1.23 (+18 % ±6 %, n=4)`."""
    return text if bar is None else f"{text} ({bar.label})"


def prior_metrics(bars: Mapping[str, ErrorBar], metrics: Mapping[str, float]) -> dict[str, float]:
    """What a new run logs of the error bars of the runs before it, per kind (mem, time):
    `<kind>_pred_rel_err_prior` (median), `<kind>_pred_rel_err_prior_spread` (MAD),
    `<kind>_pred_prior_num_runs`, and when the run has the prediction and the measurement, the
    calibrated prediction `<pred metric>_calibrated` and its error
    `<kind>_pred_calibrated_rel_err` (how much the calibration helps, run after run)."""
    out: dict[str, float] = {}
    for kind, bar in bars.items():
        pred, measured, err = PRED_METRICS[kind]
        out[f"{err}_prior"] = bar.median_rel_err
        out[f"{err}_prior_spread"] = bar.spread_rel_err
        out[f"{kind}_pred_prior_num_runs"] = float(bar.num_runs)
        if metrics.get(pred) is not None:
            out[f"{pred}_calibrated"] = calibrate(metrics[pred], bar)
            calibrated_err = rel_err(out[f"{pred}_calibrated"], metrics.get(measured))
            if calibrated_err is not None:
                out[f"{kind}_pred_calibrated_rel_err"] = calibrated_err
    return out


def calibrated_prediction(prediction: Any, bars: Mapping[str, ErrorBar]) -> Any:
    """A figures.predict.Prediction with its device memory (every term) and step time (every part,
    and the tokens/s and cost that follow) divided by (1 + their median error); unchanged where
    there is no bar. The host RAM of offload is not measured, so not calibrated."""
    p = prediction
    assumptions = {**p.assumptions, "calibrated": {k: b.as_dict() for k, b in bars.items()}}
    if "mem" in bars:
        factor = 1.0 / (1.0 + bars["mem"].median_rel_err)
        mem = p.mem
        scaled: dict[str, Any] = {
            f.name: getattr(mem, f.name) * factor
            for f in dataclasses.fields(mem)
            if f.name != "terms"
        }
        scaled["terms"] = {name: v * factor for name, v in mem.terms.items()}
        p = dataclasses.replace(p, mem=dataclasses.replace(mem, **scaled))
    if "time" in bars and p.step_time_s is not None:
        factor = 1.0 / (1.0 + bars["time"].median_rel_err)
        p = dataclasses.replace(
            p,
            time_s={name: t * factor for name, t in p.time_s.items()},
            step_time_s=p.step_time_s * factor,
            tokens_per_s=None if p.tokens_per_s is None else p.tokens_per_s / factor,
            cost_usd_per_1m_tokens=None
            if p.cost_usd_per_1m_tokens is None
            else p.cost_usd_per_1m_tokens * factor,
        )
    return dataclasses.replace(p, assumptions=assumptions)
