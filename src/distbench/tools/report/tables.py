"""The report's pure tables over a flat DataFrame of runs (load.flat_table): the grid, pivots
(label x world size), the best run per headline metric, the throughput-vs-memory Pareto front,
scaling efficiency, failed runs and the prediction errors. No MLflow, no plotting. The headline
metrics, their goals and labels are the workloads' declared MetricSpecs (metric_catalog).

    python -c "from distbench.tools.report.tables import *; print(headline_metrics())"
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from distbench.figures.fair import (
    best_per_group,
    comparable_keys,
    fairness_note,
    group_label,
    per_device,
)
from distbench.figures.pred_error import KEY_TAGS, PRED_METRICS, error_bar, run_rel_errs
from distbench.workloads import MetricSpec, metric_catalog

PRED_COLUMNS = tuple(PRED_METRICS.values())


def headline_metrics() -> list[MetricSpec]:
    """The metrics of every pivot and verdict (MetricSpec.headline), in the catalogue's order:
    step time, throughput, TFLOP/s per device, MFU, peak memory, cost."""
    return [m for m in metric_catalog().values() if m.headline]


def finished(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "FINISHED"] if "status" in df else df


def with_labels(df: pd.DataFrame) -> pd.DataFrame:
    """A `label` column naming a configuration in pivots and plots: the strategy, plus
    `-z<stage>` where one strategy ran with several ZeRO stages (strategy=dp zero_stage=0,1)."""
    df = df.copy()
    if "strategy" not in df:
        df["label"] = df.get("run_name", pd.Series(index=df.index, dtype=object))
        return df
    df["label"] = df["strategy"].fillna(df.get("workload", "?")).astype(str)
    if "zero_stage" in df:
        stages = df.groupby("label")["zero_stage"].transform("nunique")
        several = stages > 1
        df.loc[several, "label"] = df["label"] + "-z" + df["zero_stage"].astype(str)
    return df


def pivot(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """label × world_size of a metric over finished runs (median of repeats); empty when no
    finished run has the metric."""
    df = with_labels(finished(df))
    if metric not in df or "world_size" not in df or df[metric].notna().sum() == 0:
        return pd.DataFrame()
    df = df.dropna(subset=[metric, "world_size"])
    table = df.pivot_table(index="label", columns="world_size", values=metric, aggfunc="median")
    table.columns = [int(c) for c in table.columns]
    table.index.name, table.columns.name = "strategy", "world_size"
    return table


GRID_KEYS = ("run_name", "strategy", "world_size", "zero_stage", "status", "failure_kind")
# What the grid shows after the world size: the layout (dp×tp×pp) and the tokens per optimizer
# step (load.flat_table), the two things a fair comparison needs (figures/fair.py).
FAIR_KEYS = ("layout", "tokens_per_step")
# Grid columns that move to the grid's `constant` note when every run says the same.
MOVABLE_KEYS = frozenset({"strategy", "world_size", "zero_stage", "status", "failure_kind"})


def grid_table(df: pd.DataFrame) -> pd.DataFrame:
    """The whole grid in one table: one row per run (failed ones too), its configuration (the
    sweep's varied keys, the layout and tokens per step after the world size) and every
    headline metric some finished run has (raw values; the run order of flat_table). With two
    runs or more, a configuration column whose every run says the same leaves the table for
    `grid.attrs["constant"]` {column: value}. `run_id` is kept last, for the link to the run."""
    swept = [k for k in df.attrs.get("swept", []) if k in df and k not in GRID_KEYS]
    order = [*GRID_KEYS[:1], *swept, *GRID_KEYS[1:3], *FAIR_KEYS, *GRID_KEYS[3:]]
    keys = [c for c in order if c in df]
    names = [m.name for m in headline_metrics()]
    metrics = [m for m in names if m in df and finished(df)[m].notna().any()]
    grid = df[keys + metrics + (["run_id"] if "run_id" in df else [])].reset_index(drop=True)
    constant = {}
    for col in keys:
        movable = col in MOVABLE_KEYS or col in swept
        if movable and len(grid) > 1 and grid[col].nunique(dropna=False) == 1:
            constant[col] = grid[col].iloc[0]
    grid = grid.drop(columns=list(constant))
    grid.attrs["constant"] = {k: v for k, v in constant.items() if pd.notna(v)}
    return grid


def comparable_groups(df: pd.DataFrame, metric: str) -> list[tuple[Any, ...]]:
    """Each row's comparison group for `metric` (figures/fair.py): its tokens per step and,
    unless the metric is per device while every row has the same tokens per step, its world
    size."""
    ws = [_value(v) for v in df["world_size"]] if "world_size" in df else [None] * len(df)
    tokens = (
        [_value(v) for v in df["tokens_per_step"]] if "tokens_per_step" in df else [None] * len(df)
    )
    return comparable_keys(ws, tokens, per_device(metric))


def _value(v: Any) -> Any:
    """A cell as a plain number (None when missing), so that 2 and 2.0 group together."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None
    return float(v) if isinstance(v, int | float | np.number) else v


def group_bests(done: pd.DataFrame, metric: str, goal: str) -> dict[tuple[Any, ...], int]:
    """{comparison group: position in `done` of its best run} for a metric (comparable_groups:
    never across tokens per step; per world size unless the metric is per device). Only groups
    of two runs or more with the metric compare anything; when none has two, every group."""
    values = [_value(v) for v in done[metric]]
    keys = comparable_groups(done, metric)
    best = best_per_group(values, keys, goal)
    known = Counter(k for k, v in zip(keys, values, strict=True) if v is not None)
    compared = {key: i for key, i in best.items() if known[key] > 1}
    return compared or best


def best_rows(grid: pd.DataFrame) -> dict[str, list[int]]:
    """For each headline metric column of `grid`: the row index of the best finished run of
    each comparison group (group_bests)."""
    done = finished(grid)
    best: dict[str, list[int]] = {}
    for metric in headline_metrics():
        if metric.name in done and done[metric.name].notna().any():
            groups = group_bests(done, metric.name, metric.goal)
            best[metric.name] = sorted(int(done.index[i]) for i in groups.values())
    return best


def best_per_metric(df: pd.DataFrame) -> pd.DataFrame:
    """For each comparison group and headline metric a finished run has (group_bests): the
    best run (min for time, memory, cost; max for throughput, TFLOP/s, MFU), its value, its
    configuration and `group`, the group as text (`world_size 2, 1,024 tokens/step`)."""
    df = finished(df).reset_index(drop=True)
    rows = []
    for order, spec in enumerate(headline_metrics()):
        metric, goal = spec.name, spec.goal
        if metric not in df or df[metric].notna().sum() == 0:
            continue
        for key, i in group_bests(df, metric, goal).items():
            best = df.loc[i]
            rows.append(
                {
                    "order": (_sortable(key), order),
                    "metric": metric,
                    "goal": goal,
                    "label": spec.label,
                    "value": float(best[metric]),
                    "run_name": best.get("run_name"),
                    "strategy": best.get("strategy"),
                    "world_size": best.get("world_size"),
                    "zero_stage": best.get("zero_stage"),
                    "layout": best.get("layout"),
                    "tokens_per_step": best.get("tokens_per_step"),
                    "group": group_label(key),
                    "run_id": best.get("run_id"),
                }
            )
    rows.sort(key=lambda row: row.pop("order"))  # by group, then the headline metrics' order
    out = pd.DataFrame(rows)
    out.attrs["note"] = comparison_note(df) if len(rows) else None
    return out


def comparison_note(df: pd.DataFrame) -> str | None:
    """How the bests of these (finished) runs were picked (figures/fair.py fairness_note), and
    the runs alone in their world size and tokens per step, which no best compares."""
    ws = [_value(v) for v in df["world_size"]] if "world_size" in df else [None] * len(df)
    tokens = comparable_groups(df, "")  # (tokens, world size) of each run
    note = fairness_note(ws, [key[0] for key in tokens])
    counts = Counter(tokens)
    names = df.get("run_name", df.index)
    alone = [str(n) for n, key in zip(names, tokens, strict=True) if counts[key] == 1]
    if note and alone and len(alone) < len(df):
        note += f"; no other run has the world size and tokens per step of {', '.join(alone)}"
    return note


def _sortable(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A group key that sorts with unknown parts last."""
    return tuple((v is None, v if isinstance(v, float) else 0.0, str(v)) for v in key)


def pareto_front(
    df: pd.DataFrame, x: str = "peak_mem_gib", y: str = "throughput_tokens_per_s"
) -> pd.DataFrame:
    """Finished runs that no other run beats on both: lower `x` (memory) and higher `y`
    (throughput); sorted by `x`. A run is dominated when another has x <= and y >=, one strictly."""
    df = finished(df)
    if x not in df or y not in df:
        return df.iloc[0:0]
    points = df.dropna(subset=[x, y])
    xs, ys = points[x].to_numpy(), points[y].to_numpy()
    keep = [
        not np.any((xs <= xs[i]) & (ys >= ys[i]) & ((xs < xs[i]) | (ys > ys[i])))
        for i in range(len(points))
    ]
    return points[keep].sort_values(x)


def scaling_efficiency(df: pd.DataFrame) -> pd.DataFrame:
    """Per configuration and world size: throughput per device, and its ratio to the same
    configuration's throughput per device at its smallest world size (1.0 = linear scaling)."""
    df = with_labels(finished(df))
    need = ("throughput_tokens_per_s", "world_size")
    if any(c not in df for c in need):
        return pd.DataFrame(columns=["label", "world_size", "throughput_per_device", "efficiency"])
    df = df.dropna(subset=list(need))
    per = (
        df.assign(throughput_per_device=df["throughput_tokens_per_s"] / df["world_size"])
        .groupby(["label", "world_size"], as_index=False)["throughput_per_device"]
        .median()
        .sort_values(["label", "world_size"])
    )
    base = per.groupby("label")["throughput_per_device"].transform("first")
    per["efficiency"] = per["throughput_per_device"] / base
    per["world_size"] = per["world_size"].astype(int)
    return per.reset_index(drop=True)


def scales(eff: pd.DataFrame) -> bool:
    """Whether a scaling_efficiency table compares anything: some configuration ran at two or
    more world sizes (else every efficiency is 1.0 by definition)."""
    return bool(len(eff)) and bool((eff.groupby("label")["world_size"].nunique() > 1).any())


def failed_runs(df: pd.DataFrame) -> pd.DataFrame:
    """Runs that did not finish, and finished runs flagged with `mfu_error`, with the reason."""
    bad = df["status"] != "FINISHED" if "status" in df else pd.Series(False, index=df.index)
    if "mfu_error" in df:
        bad |= df["mfu_error"].notna()
    cols = [
        c
        for c in ("run_name", "status", "strategy", "world_size", "failure_kind", "failure_reason")
        if c in df
    ] + (["mfu_error"] if "mfu_error" in df else [])
    return df.loc[bad, cols].reset_index(drop=True)


def pred_vs_measured(df: pd.DataFrame) -> pd.DataFrame:
    """Predicted vs measured peak memory and step time per finished run, with the relative
    errors (pred − measured) / measured (recomputed when the run did not log them), and where
    runs have them its `oversubscribed` tag and `pred_oversubscription`."""
    df = finished(df)
    cols = [c for c in ("run_name", "strategy", "world_size") if c in df]
    out = df[cols].copy()
    for pred, measured, err in PRED_COLUMNS:
        if pred not in df or measured not in df:
            continue
        out[pred], out[measured] = df[pred], df[measured]
        out[err] = df[err] if err in df else (df[pred] - df[measured]) / df[measured]
    if len(out.columns) == len(cols):
        return out.iloc[0:0]
    out = out.dropna(how="all", subset=[c for c in out.columns if c not in cols])
    # whether the run's cores were shared (its tag) and the prediction assumed so (its metric)
    for extra in ("oversubscribed", "pred_oversubscription"):
        if extra in df:
            out[extra] = df.loc[out.index, extra]
    return out


def key_labels(df: pd.DataFrame) -> pd.Series:
    """The prediction key of each run (pred_error.KEY_TAGS: model strategy z<stage> hardware
    precision) as one label, e.g. `tiny dp z0 cpu fp32`; '?' for a tag the run lacks."""
    parts = [
        (("z" if tag == "zero_stage" else "") + df[tag].astype(str)).where(df[tag].notna(), "?")
        if tag in df
        else pd.Series("?", index=df.index)
        for tag in KEY_TAGS
    ]
    return pd.concat(parts, axis=1).agg(" ".join, axis=1) if len(df) else pd.Series(dtype=object)


def pred_error_history(df: pd.DataFrame, keys: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each finished run's prediction errors in %, oldest first: `start_time`, `run_name`,
    `key` (key_labels), `<kind>_err_pct` = 100 (pred − measured)/measured for mem and time,
    and where the run logged them (pred_error.prior_metrics) `<kind>_prior_err_pct`, the
    median error of the runs before it, and `<kind>_calibrated_err_pct`, the error of its
    prediction calibrated by that prior. With `keys` (e.g. a sweep's runs), only the runs of
    the keys it has: the sweep's configurations, through the experiment's history."""
    df = finished(df)
    if "start_time" not in df or df.empty:
        return pd.DataFrame()
    out = pd.DataFrame({"start_time": df["start_time"], "run_name": df.get("run_name")})
    out["key"] = key_labels(df)
    metric_columns = [c for c in df.columns if any(c in cols for cols in PRED_COLUMNS)]
    rel_errs = [
        run_rel_errs({k: v for k, v in row.items() if pd.notna(v)})
        for row in df[metric_columns].to_dict("records")
    ]
    for kind, (_, _, err) in PRED_METRICS.items():
        out[f"{kind}_err_pct"] = [100 * errs.get(kind, np.nan) for errs in rel_errs]
        for suffix, metric in (
            ("prior", f"{err}_prior"),
            ("calibrated", f"{kind}_pred_calibrated_rel_err"),
        ):
            if metric in df:
                out[f"{kind}_{suffix}_err_pct"] = 100 * df[metric]
    out = out.dropna(how="all", subset=[f"{kind}_err_pct" for kind in PRED_METRICS])
    if keys is not None:
        out = out[out["key"].isin(set(key_labels(finished(keys))))]
    return out.sort_values("start_time").reset_index(drop=True)


def pred_error_summary(history: pd.DataFrame) -> pd.DataFrame:
    """Per key of a pred_error_history: the error bar the planner now shows (median ± MAD of
    the newest pred_error.MAX_RUNS_PER_KEY runs, pred_error.error_bar) and the latest error."""
    from distbench.figures.pred_error import MAX_RUNS_PER_KEY

    rows = []
    for key, group in history.groupby("key", sort=True):
        row: dict[str, Any] = {"key": key, "runs": len(group)}
        for kind in PRED_METRICS:
            errs = group[f"{kind}_err_pct"].dropna()
            bar = error_bar(list(errs.iloc[-MAX_RUNS_PER_KEY:])) if len(errs) else None
            row[f"{kind}_err_pct"] = (
                "-" if bar is None else (f"{bar.median_rel_err:+.0f} ±{bar.spread_rel_err:.0f}")
            )
            row[f"{kind}_latest_err_pct"] = float(errs.iloc[-1]) if len(errs) else np.nan
        rows.append(row)
    return pd.DataFrame(rows)
