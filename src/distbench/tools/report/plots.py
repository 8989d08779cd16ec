"""The report's matplotlib figures (Agg backend, PNG files): throughput and TFLOP/s, peak memory
per rank, the throughput-vs-memory Pareto front, cost, scaling efficiency and the prediction
errors over time. Each returns its path, or None when the runs have nothing to draw.

    python -c "from distbench.tools.report.plots import PLOTS; print([n for n, _ in PLOTS])"
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distbench.figures.pred_error import PRED_ERROR_TARGET_PCT
from distbench.tools.report.tables import (
    finished,
    pareto_front,
    pivot,
    scales,
    scaling_efficiency,
    with_labels,
)

RANK_MEM = re.compile(r"^peak_mem_gib_rank(\d+)$")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def _grouped_bars(ax: Any, table: pd.DataFrame, ylabel: str) -> None:
    """Bars of a pivot (rows = strategies, columns = world sizes), grouped by world size."""
    width = 0.8 / max(len(table.index), 1)
    xs = np.arange(len(table.columns))
    for i, label in enumerate(table.index):
        ax.bar(xs + i * width, table.loc[label].to_numpy(dtype=float), width, label=str(label))
    ax.set_xticks(xs + width * (len(table.index) - 1) / 2)
    ax.set_xticklabels([f"ws={c}" for c in table.columns])
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def plot_throughput_tflops(df: pd.DataFrame, path: Path) -> Path | None:
    """Throughput and TFLOP/s per device, per strategy and world size."""
    panels = [("throughput_tokens_per_s", "tokens/s"), ("tflops_per_device", "TFLOP/s per device")]
    tables = [(pivot(df, m), label) for m, label in panels]
    tables = [(t, label) for t, label in tables if not t.empty]
    if not tables:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(tables), figsize=(6 * len(tables), 4.2), squeeze=False)
    for ax, (table, label) in zip(axes[0], tables, strict=True):
        _grouped_bars(ax, table, label)
        ax.set_title(label)
    axes[0][0].legend(title="strategy", fontsize=8)
    return _save(fig, path)


def plot_peak_mem_per_rank(df: pd.DataFrame, path: Path) -> Path | None:
    """Peak memory of each rank (peak_mem_gib_rank{r}) per finished run."""
    df = finished(df)
    ranks = sorted((int(m.group(1)), c) for c in df.columns if (m := RANK_MEM.match(str(c))))
    if not ranks:
        return None
    df = df.dropna(subset=[c for _, c in ranks], how="all")
    if df.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(df) + 2), 4.2))
    width = 0.8 / len(ranks)
    xs = np.arange(len(df))
    for i, (rank, col) in enumerate(ranks):
        ax.bar(xs + i * width, df[col].to_numpy(dtype=float), width, label=f"rank {rank}")
    ax.set_xticks(xs + width * (len(ranks) - 1) / 2)
    ax.set_xticklabels(df["run_name"].astype(str), rotation=30, ha="right")
    ax.set_ylabel("peak memory (GiB)")
    ax.set_title("peak memory per rank")
    ax.legend(fontsize=8, ncol=min(len(ranks), 4))
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def plot_pareto(df: pd.DataFrame, path: Path) -> Path | None:
    """Throughput vs peak memory of every finished run; the Pareto front joined by a line."""
    x, y = "peak_mem_gib", "throughput_tokens_per_s"
    points = with_labels(finished(df))
    if x not in points or y not in points:
        return None
    points = points.dropna(subset=[x, y])
    if points.empty:
        return None
    front = pareto_front(points, x, y)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.8))
    for label, group in points.groupby("label"):
        ax.scatter(group[x], group[y], s=50, label=str(label))
    for _, row in points.iterrows():
        ax.annotate(str(row["run_name"]), (row[x], row[y]), fontsize=7, xytext=(4, 4),
                    textcoords="offset points")  # fmt: skip
    # A staircase: with at most x memory, the best throughput is the front's last point <= x.
    ax.step(front[x], front[y], "k--", where="post", lw=1, label="Pareto front")
    ax.set_xlabel("peak memory (GiB), lower is better")
    ax.set_ylabel("throughput (tokens/s), higher is better")
    ax.set_title("throughput vs memory")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_cost(df: pd.DataFrame, path: Path) -> Path | None:
    """Cost per 1M tokens per strategy and world size."""
    table = pivot(df, "cost_usd_per_1m_tokens")
    if table.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    _grouped_bars(ax, table, "USD per 1M tokens")
    ax.set_title("cost per 1M tokens (lower is better)")
    ax.legend(title="strategy", fontsize=8)
    return _save(fig, path)


def plot_scaling(df: pd.DataFrame, path: Path) -> Path | None:
    """Scaling efficiency vs world size per strategy (1.0 = linear); None when no configuration
    ran at two world sizes (a flat line at 1.0 says nothing)."""
    eff = scaling_efficiency(df)
    if not scales(eff):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, group in eff.groupby("label"):
        ax.plot(group["world_size"], group["efficiency"], "o-", label=str(label))
    ax.axhline(1.0, color="grey", ls=":", lw=1, label="linear")
    ax.set_xticks(sorted(eff["world_size"].unique()))
    ax.set_xlabel("world size")
    ax.set_ylabel("throughput per device / at smallest world size")
    ax.set_title("scaling efficiency")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


# The targets for the planner (issue 13): memory within 15 %, step time within 30 %.


def plot_pred_error_history(history: pd.DataFrame, path: Path) -> Path | None:
    """Prediction error (%) of each run against its start time, one line per key, memory and
    step time side by side, with the targets (PRED_ERROR_TARGET_PCT) shaded."""
    if history.empty:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), squeeze=False)
    for ax, (kind, title) in zip(
        axes[0], (("mem", "peak memory"), ("time", "step time")), strict=True
    ):
        target = PRED_ERROR_TARGET_PCT[kind]
        ax.axhspan(-target, target, color="green", alpha=0.08, label=f"±{target:.0f} % target")
        ax.axhline(0.0, color="grey", lw=1)
        for key, group in history.groupby("key"):
            points = group.dropna(subset=[f"{kind}_err_pct"])
            ax.plot(points["start_time"], points[f"{kind}_err_pct"], "o-", ms=4, label=str(key))
        ax.set_title(f"{title}: (predicted − measured) / measured")
        ax.set_ylabel("error (%)")
        ax.grid(alpha=0.3)
        ax.tick_params(axis="x", labelrotation=30)
    axes[0][0].legend(fontsize=7)
    return _save(fig, path)


PLOTS = (
    ("throughput_tflops.png", plot_throughput_tflops),
    ("peak_mem_per_rank.png", plot_peak_mem_per_rank),
    ("pareto_throughput_vs_memory.png", plot_pareto),
    ("cost_per_1m_tokens.png", plot_cost),
    ("scaling_efficiency.png", plot_scaling),
)
