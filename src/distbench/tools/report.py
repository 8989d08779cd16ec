"""`distbench report`: a sweep's runs, read back from MLflow, as tables, plots and a verdict.

Pure functions turn a flat DataFrame of runs (one row per child run: `run_id`, `run_name`,
`status`, the tags `strategy`, `world_size`, `zero_stage`, ... and every metric by its bare name)
into the grid table (one row per run, linked to its MLflow run page), pivots, the best
configuration per metric, the throughput-vs-memory Pareto front, scaling efficiency and
matplotlib figures; `load_runs` is the thin MLflow loader and `log_report` puts the folder back on
the sweep's parent run. Runs without a metric (failed runs, gemm/collectives workloads) are kept
as rows and skipped by what needs the metric. report.html is self-contained (plots embedded as
data URIs, rendered from templates/report.html.j2): MLflow's artifact viewer shows it in a
sandboxed frame where relative image paths break.

    distbench report --sweep latest --out report/          # the most recent sweep
    distbench report --sweep <parent run id> --format csv --out report/
    distbench report --sweep multirun/2026-11-22/10-00-00   # or its parent run's name, or previous
    distbench report --ui-url http://127.0.0.1:5000     # absolute run links for a sqlite store
    python -c "from distbench.tools.report import *; print(best_per_metric(flat_table(load_runs( \
        'sqlite:///mlflow.db', 'latest').runs)))"
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distbench.figures.pred_error import (
    KEY_TAGS,
    PRED_ERROR_TARGET_PCT,
    PRED_METRICS,
    error_bar,
    run_rel_errs,
)
from distbench.tracking.mlflow_store import RUN_ID
from distbench.tracking.signature import RESUMED_INTO_TAG_PREFIX

# metric, goal ("min" or "max"), label with unit. The headline of every pivot and verdict.
HEADLINE_METRICS = (
    ("step_time_s_p50", "min", "step time p50 (s)"),
    ("throughput_tokens_per_s", "max", "throughput (tokens/s)"),
    ("tflops_per_device", "max", "TFLOP/s per device"),
    ("mfu_pct", "max", "MFU (%)"),
    ("peak_mem_gib", "min", "peak memory (GiB)"),
    ("cost_usd_per_1m_tokens", "min", "cost (USD per 1M tokens)"),
)
# Tags copied into the flat table as columns (when a run has them), besides every `hw.*` tag.
TAG_COLUMNS = (
    "strategy",
    "world_size",
    "zero_stage",
    "workload",
    "model",
    "batch",
    "dtype",
    "precision",
    "hardware",
    "backend",
    "failure_kind",
    "failure_reason",
    "mfu_error",
)
ID_COLUMNS = ("run_id", "run_name", "status", "start_time", "parent_run_id")
RANK_MEM = re.compile(r"^peak_mem_gib_rank(\d+)$")
PRED_COLUMNS = tuple(PRED_METRICS.values())
# Rows of the per-run prediction-error table (the newest; the plot shows them all).
MAX_PRED_HISTORY_ROWS = 30
REPORT_ARTIFACT_DIR = "report"


# --------------------------------------------------------------------------- loading


SWEEP_FORMS = (
    "'latest', 'previous' (the sweep started just before the candidate, or before the latest), "
    "a sweep's parent run id or run name, or a sweep dir (multirun/DAY/TIME)"
)


@dataclass
class Selection:
    """What `load_runs` selected: the runs, the sweep's parent (None for a whole experiment)."""

    runs: list[Any]
    parent_run_id: str | None
    experiment_id: str
    title: str
    sweep_dir: str | None = None  # the parent's distbench.sweep_dir tag: where its files are
    history: list[Any] = field(default_factory=list)  # every job's run of the experiment


@dataclass(frozen=True)
class Sweeps:
    """An experiment's runs sorted into sweeps: each run's parent, the sweeps a resumed run
    also belongs to (tag resumed_into.<id>), and the sweeps' parent runs (top-level runs that
    own children), oldest first."""

    parent_of: dict[str, str | None]
    resumed_into: dict[str, set[str]]
    owners: set[str]  # every run that owns another: the parents, nested ones too
    parents: list[Any]

    def children(self, runs: list[Any], parent_run_id: str) -> list[Any]:
        return [
            r
            for r in runs
            if self.parent_of.get(r.info.run_id) == parent_run_id
            or parent_run_id in self.resumed_into.get(r.info.run_id, ())
        ]


def _all_runs(client: Any, experiment_id: str) -> list[Any]:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _started(run: Any) -> tuple[int, str]:
    return run.info.start_time or 0, run.info.run_id


def index_sweeps(runs: list[Any]) -> Sweeps:
    """Which runs are sweeps' parents and whose runs each owns (a resumed sweep's parent also
    owns the earlier runs it skipped)."""
    parent_of = {r.info.run_id: r.data.tags.get("mlflow.parentRunId") for r in runs}
    resumed_into = {
        r.info.run_id: {k[len(RESUMED_INTO_TAG_PREFIX) :] for k in r.data.tags}
        for r in runs
        if any(k.startswith(RESUMED_INTO_TAG_PREFIX) for k in r.data.tags)
    }
    owners = {p for p in parent_of.values() if p} | set().union(*resumed_into.values())
    parents = [r for r in runs if r.info.run_id in owners and not parent_of[r.info.run_id]]
    return Sweeps(parent_of, resumed_into, owners, sorted(parents, key=_started))


def read_sweep_dir(path: Path) -> tuple[set[str], str | None]:
    """What a sweep dir records of its sweep, from its jobs' spooled runs (JOB/mlflow_run.json):
    the parent run ids they name, and their experiment's name (None when none says)."""
    import json

    from distbench.tracking.spool import PAYLOAD

    ids: set[str] = set()
    experiment = None
    for payload_path in sorted(path.glob(f"*/{PAYLOAD}")):
        try:
            payload = json.loads(payload_path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue  # a truncated spool names nothing; `distbench sync` reports it
        if isinstance(payload, dict):
            ids |= {payload["parent_run_id"]} if payload.get("parent_run_id") else set()
            experiment = experiment or payload.get("experiment_name")
    return ids, experiment


def pick_sweep(
    parents: list[Any],
    sweep: str,
    experiment: str,
    anchor: str | None = None,
    sweep_dir: str | None = None,
    recorded: set[str] | frozenset[str] = frozenset(),
) -> str:
    """The parent run id that `sweep` names among an experiment's sweep parents (oldest
    first): "latest" the newest; "previous" the one started just before `anchor` (default: the
    newest); with `sweep_dir` (a resolved path) the newest whose distbench.sweep_dir tag is it,
    else the newest of the ids the dir's spooled runs `recorded`; else the one with that run
    name. LookupError, one line naming the value and what is allowed, otherwise."""
    from distbench.tracking.spool import SWEEP_DIR_TAG

    where = f"in experiment {experiment!r}"
    if not parents:
        raise LookupError(f"no sweep (a parent run with children) {where}")
    if sweep == "latest":
        return parents[-1].info.run_id
    if sweep == "previous":
        anchor = anchor or parents[-1].info.run_id
        ids = [r.info.run_id for r in parents]
        if anchor not in ids:
            raise LookupError(f"run {anchor} is not a sweep's parent run {where}")
        if ids.index(anchor) == 0:
            raise LookupError(f"no sweep started before sweep {anchor} {where}")
        return ids[ids.index(anchor) - 1]
    if sweep_dir is not None:
        tagged = [r for r in parents if r.data.tags.get(SWEEP_DIR_TAG) == sweep_dir]
        tagged = tagged or [r for r in parents if r.info.run_id in recorded]
        if not tagged:
            raise LookupError(
                f"no sweep of {sweep_dir} {where} (no parent run tagged {SWEEP_DIR_TAG} with "
                "it, nor named by its spooled runs); upload it with: distbench sync DIR"
            )
        return tagged[-1].info.run_id
    named = [r.info.run_id for r in parents if r.info.run_name == sweep]
    if len(named) > 1:
        raise LookupError(
            f"{len(named)} sweeps {where} are named {sweep!r} ({', '.join(named)}); give a run id"
        )
    if not named:
        raise LookupError(f"no sweep {sweep!r} {where}; give {SWEEP_FORMS}")
    return named[0]


def sweep_path(sweep: str | None) -> Path | None:
    """The sweep dir that `sweep` names, resolved, or None when it names no directory.
    LookupError when it looks like a path (has a '/') but no such directory exists."""
    if not sweep or sweep in ("latest", "previous") or RUN_ID.match(sweep):
        return None
    path = Path(sweep).expanduser()
    if path.is_dir():
        return path.resolve()
    if "/" in sweep:
        raise LookupError(f"no such sweep dir {sweep!r}; give {SWEEP_FORMS}")
    return None


def load_runs(
    tracking_uri: str, sweep: str | None, experiment: str = "distbench", anchor: str | None = None
) -> Selection:
    """The child runs of the sweep that `sweep` names (see SWEEP_FORMS and pick_sweep; a run id
    may be in any experiment, the other forms are looked up in `experiment`, or in the one a
    sweep dir's runs name, or in `anchor`'s for "previous"), or every non-parent run of the
    experiment when `sweep` is None. Raises LookupError with a one-line reason when nothing
    matches."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from distbench.tracking.spool import SWEEP_DIR_TAG

    client = MlflowClient(tracking_uri)
    path = sweep_path(sweep)
    recorded, named_in_dir = read_sweep_dir(path) if path else (set(), None)
    experiment = named_in_dir or experiment
    by_id = sweep if sweep and RUN_ID.match(sweep) else (anchor if sweep == "previous" else None)
    if by_id:
        try:
            experiment_id = client.get_run(by_id).info.experiment_id
        except MlflowException as exc:
            raise LookupError(f"no run {by_id!r} in {tracking_uri}") from exc
        experiment = client.get_experiment(experiment_id).name
    else:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise LookupError(f"no experiment {experiment!r} in {tracking_uri}")
        experiment_id = found.experiment_id
    runs = _all_runs(client, experiment_id)
    sweeps = index_sweeps(runs)
    jobs = [  # every job's run; `distbench compare` runs are not jobs
        r
        for r in runs
        if r.info.run_id not in sweeps.owners and r.data.tags.get("distbench.kind") != "compare"
    ]
    if sweep is None:
        return Selection(jobs, None, experiment_id, f"experiment {experiment}", history=jobs)
    if RUN_ID.match(sweep):
        parent_run_id = sweep
    else:
        where = str(path) if path else None
        parent_run_id = pick_sweep(sweeps.parents, sweep, experiment, anchor, where, recorded)
    parent = client.get_run(parent_run_id)
    children = sweeps.children(runs, parent_run_id)
    if not children:
        raise LookupError(f"run {parent_run_id} has no child runs: not a sweep's parent run")
    title = f"sweep {parent.info.run_name} ({parent_run_id})"
    return Selection(
        children, parent_run_id, experiment_id, title, parent.data.tags.get(SWEEP_DIR_TAG), jobs
    )


def flat_table(runs: list[Any]) -> pd.DataFrame:
    """MLflow runs → one row per run: ID_COLUMNS, TAG_COLUMNS, `hw.*` tags, bare metric names.
    `world_size` becomes a number (NaN when absent); columns nobody has are absent."""
    rows = []
    for run in runs:
        tags = run.data.tags
        row = {
            "run_id": run.info.run_id,
            "run_name": run.info.run_name,
            "status": run.info.status,
            "start_time": pd.to_datetime(run.info.start_time, unit="ms"),
            "parent_run_id": tags.get("mlflow.parentRunId"),
        }
        row.update({k: v for k, v in tags.items() if k in TAG_COLUMNS or k.startswith("hw.")})
        row.update(run.data.metrics)
        rows.append(row)
    df = pd.DataFrame(rows)
    if "world_size" in df:
        df["world_size"] = pd.to_numeric(df["world_size"], errors="coerce")
    if len(df):
        df = df.sort_values([c for c in ("strategy", "world_size", "run_name") if c in df])
    return df.reset_index(drop=True)


# --------------------------------------------------------------------------- pure tables


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


def grid_table(df: pd.DataFrame) -> pd.DataFrame:
    """The whole grid in one table: one row per run (failed ones too), its configuration and
    every headline metric some finished run has (raw values; the run order of flat_table).
    `run_id` is kept last, for the link to the run."""
    keys = [c for c in GRID_KEYS if c in df]
    metrics = [m for m, _, _ in HEADLINE_METRICS if m in df and finished(df)[m].notna().any()]
    return df[keys + metrics + (["run_id"] if "run_id" in df else [])].reset_index(drop=True)


def best_rows(grid: pd.DataFrame) -> dict[str, int]:
    """For each headline metric column of `grid`: the row index of its best finished run."""
    done = finished(grid)
    best = {}
    for metric, goal, _ in HEADLINE_METRICS:
        if metric in done and done[metric].notna().any():
            values = done[metric].dropna()
            best[metric] = int(values.idxmin() if goal == "min" else values.idxmax())
    return best


def run_link(experiment_id: str, run_id: str, ui_base: str | None = None) -> str:
    """The MLflow UI page of a run (`#/experiments/<id>/runs/<run_id>`, as ui_url builds the
    experiment's): absolute against `ui_base` (a tracking server or a `distbench ui` URL),
    relative to the UI's root when no UI is known."""
    fragment = f"#/experiments/{experiment_id}/runs/{run_id}"
    return f"{ui_base.rstrip('/')}/{fragment}" if ui_base else fragment


def ui_base_url(tracking_uri: str, ui_url: str | None = None) -> str | None:
    """The UI that run links point at: `ui_url` when given, else the tracking server itself
    (http/https URIs serve their UI), else None (sqlite: no server known)."""
    from distbench.tracking.secrets_mask import mask_text

    if ui_url:
        return ui_url.rstrip("/")
    if tracking_uri.startswith(("http://", "https://")):
        return mask_text(tracking_uri.rstrip("/"))
    return None


def best_per_metric(df: pd.DataFrame) -> pd.DataFrame:
    """For each headline metric a finished run has: the best run (min for time, memory, cost;
    max for throughput, TFLOP/s, MFU), its value and configuration."""
    df = finished(df)
    rows = []
    for metric, goal, label in HEADLINE_METRICS:
        if metric not in df or df[metric].notna().sum() == 0:
            continue
        values = df[metric].dropna()
        best = df.loc[values.idxmin() if goal == "min" else values.idxmax()]
        rows.append(
            {
                "metric": metric,
                "goal": goal,
                "label": label,
                "value": float(best[metric]),
                "run_name": best.get("run_name"),
                "strategy": best.get("strategy"),
                "world_size": best.get("world_size"),
                "zero_stage": best.get("zero_stage"),
                "run_id": best.get("run_id"),
            }
        )
    return pd.DataFrame(rows)


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
    errors (pred − measured) / measured (recomputed when the run did not log them)."""
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
    return out.dropna(how="all", subset=[c for c in out.columns if c not in cols])


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


# --------------------------------------------------------------------------- plots


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


# --------------------------------------------------------------------------- documents


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    if isinstance(value, (float, np.floating)):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(df: pd.DataFrame, index: bool = False) -> str:
    """A GitHub markdown table (no tabulate dependency); '-' for a missing value."""
    if df.empty:
        return "_none_\n"
    if index:
        df = df.reset_index()
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def verdict_lines(best: pd.DataFrame) -> list[str]:
    """One line per headline metric: its best run, e.g. `best throughput (tokens/s) (max): …`."""
    return [
        f"best {r.label} ({r.goal}): {_fmt(r.value)}  {r.run_name}"
        f"  (strategy={r.strategy} world_size={_fmt(r.world_size)} zero_stage={r.zero_stage})"
        for r in best.itertuples()
    ]


@dataclass(frozen=True)
class Cell:
    """One table cell as the documents show it: formatted text, a link, best of its column."""

    text: str
    href: str | None = None
    best: bool = False


@dataclass(frozen=True)
class TableView:
    """A table ready for a document: column headers and rows of cells (no pandas in templates)."""

    columns: list[str]
    rows: list[list[Cell]]


METRIC_LABELS = {metric: label for metric, _, label in HEADLINE_METRICS}


def table_view(df: pd.DataFrame) -> TableView:
    """A DataFrame as a TableView: every value through _fmt ('-' when missing)."""
    rows = [[Cell(_fmt(v)) for v in row] for row in df.itertuples(index=False)]
    return TableView([str(c) for c in df.columns], rows)


def grid_view(
    grid: pd.DataFrame, experiment_id: str | None = None, ui_base: str | None = None
) -> TableView:
    """grid_table as a TableView: the run name links its MLflow run (when the experiment is
    known), metric columns carry their label with unit, each column's best finished run is
    marked."""
    best = best_rows(grid)
    shown = [c for c in grid.columns if c != "run_id"]
    rows = []
    for i, row in grid.iterrows():
        cells = []
        for col in shown:
            href = None
            if col == "run_name" and experiment_id and isinstance(row.get("run_id"), str):
                href = run_link(experiment_id, row["run_id"], ui_base)
            cells.append(Cell(_fmt(row[col]), href, best.get(col) == i))
        rows.append(cells)
    columns = ["run" if c == "run_name" else METRIC_LABELS.get(c, c) for c in shown]
    return TableView(columns, rows)


def markdown_view(view: TableView) -> str:
    """A TableView as a GitHub markdown table: links as [text](href), best values in bold."""
    if not view.rows:
        return "_none_\n"

    def cell(c: Cell) -> str:
        text = f"[{c.text}]({c.href})" if c.href else c.text
        return f"**{text}**" if c.best else text

    lines = ["| " + " | ".join(view.columns) + " |", "|" + "---|" * len(view.columns)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in view.rows]
    return "\n".join(lines) + "\n"


@dataclass
class Sections:
    title: str
    best: pd.DataFrame
    grid: pd.DataFrame
    failed: pd.DataFrame
    pred: pd.DataFrame
    scaling: pd.DataFrame  # empty unless some configuration ran at two or more world sizes
    pred_history: pd.DataFrame  # the prediction errors of these runs' keys, oldest first
    pred_summary: pd.DataFrame  # the error bar per key
    plots: list[Path]
    num_runs: int
    num_finished: int
    experiment_id: str | None = None  # for the links to each run's MLflow page
    ui_base: str | None = None  # the UI those links point at; None: relative links
    views: dict[str, TableView] = field(default_factory=dict)


def build_sections(
    df: pd.DataFrame,
    out_dir: Path,
    title: str,
    experiment_id: str | None = None,
    ui_base: str | None = None,
    history: pd.DataFrame | None = None,
) -> Sections:
    """The report's tables, views and plots; `history` (the experiment's runs, flat_table) is
    where the prediction errors of these runs' keys are followed over time (default: df)."""
    plots = [fn(df, out_dir / name) for name, fn in PLOTS]
    pred_history = pred_error_history(df if history is None else history, keys=df)
    plots.append(plot_pred_error_history(pred_history, out_dir / "pred_error_over_time.png"))
    scaling = scaling_efficiency(df)
    sections = Sections(
        title=title,
        best=best_per_metric(df),
        grid=grid_table(df),
        failed=failed_runs(df),
        pred=pred_vs_measured(df),
        scaling=scaling if scales(scaling) else scaling.iloc[0:0],
        pred_history=pred_history,
        pred_summary=pred_error_summary(pred_history) if len(pred_history) else pd.DataFrame(),
        plots=[p for p in plots if p is not None],
        num_runs=len(df),
        num_finished=len(finished(df)),
        experiment_id=experiment_id,
        ui_base=ui_base,
    )
    sections.views = {
        "grid": grid_view(sections.grid, experiment_id, ui_base),
        "failed": table_view(sections.failed),
        "pred": table_view(sections.pred),
        "scaling": table_view(sections.scaling),
        "pred_summary": table_view(sections.pred_summary),
        "pred_history": table_view(
            pred_history.iloc[-MAX_PRED_HISTORY_ROWS:].assign(
                start_time=lambda t: t["start_time"].dt.strftime("%Y-%m-%d %H:%M")
            )
            if len(pred_history)
            else pred_history
        ),
    }
    return sections


NO_SCALING = "no configuration ran at two or more world sizes"
PRED_ERROR_NOTE = (
    "error = (predicted − measured) / measured in %, per key (model strategy ZeRO stage "
    "hardware precision), through every run of the experiment with that key; per key the "
    "median ± median absolute deviation of the newest runs is the error bar `distbench plan` "
    "shows; prior = the bar the run was logged with, calibrated = its prediction divided by it. "
    f"Newest {MAX_PRED_HISTORY_ROWS} runs listed."
)


def render_markdown(s: Sections) -> str:
    views = s.views
    parts = [
        f"# distbench report: {s.title}\n",
        f"{s.num_runs} runs, {s.num_finished} finished.\n",
        "## Best configuration per metric\n",
        "\n".join(f"- {line}" for line in verdict_lines(s.best)) or "_no finished run_",
        "",
        "## Runs\n",
        markdown_view(views["grid"]),
        "## Failed runs\n",
        markdown_view(views["failed"]),
        "## Predicted vs measured\n",
        markdown_view(views["pred"]),
        "## Prediction error over time\n",
        f"_{PRED_ERROR_NOTE}_\n",
        markdown_view(views["pred_summary"]),
        markdown_view(views["pred_history"]),
        "## Scaling efficiency\n",
        markdown_view(views["scaling"]) if views["scaling"].rows else f"_{NO_SCALING}_\n",
    ]
    parts += ["## Plots\n"] + [f"![{p.stem}]({p.name})\n" for p in s.plots]
    return "\n".join(parts)


def data_uri(path: Path) -> str:
    """A PNG as a data: URI, so that the page needs no file beside it."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _template(name: str) -> Any:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader("distbench.tools", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template(name)


def render_html(s: Sections) -> str:
    """The self-contained report page (templates/report.html.j2): plots embedded."""
    return _template("report.html.j2").render(
        title=s.title,
        num_runs=s.num_runs,
        num_finished=s.num_finished,
        verdict=verdict_lines(s.best),
        views=s.views,
        no_scaling=NO_SCALING,
        pred_error_note=PRED_ERROR_NOTE,
        relative_links=s.experiment_id is not None and s.ui_base is None,
        plots=[{"name": p.stem, "src": data_uri(p)} for p in s.plots],
    )


def write_csv(df: pd.DataFrame, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "runs.csv"
    df.to_csv(path, index=False)
    return path


def write_report(
    df: pd.DataFrame,
    out_dir: Path,
    title: str,
    experiment_id: str | None = None,
    ui_base: str | None = None,
    history: pd.DataFrame | None = None,
) -> tuple[list[Path], Sections]:
    """report.md, report.html, runs.csv and the PNG plots in out_dir; returns the files. Run
    names link their MLflow run page when `experiment_id` is given (see run_link); `history`
    (flat_table of the experiment's runs) follows the prediction errors over time."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = build_sections(df, out_dir, title, experiment_id, ui_base, history)
    md, page = out_dir / "report.md", out_dir / "report.html"
    md.write_text(render_markdown(sections))
    page.write_text(render_html(sections))
    return [md, page, write_csv(df, out_dir), *sections.plots], sections


def report_note(experiment_id: str, parent_run_id: str, sections: Sections) -> str:
    """The parent run's description (`mlflow.note.content`): the verdict and links."""
    base = f"#/experiments/{experiment_id}/runs/{parent_run_id}/artifacts/{REPORT_ARTIFACT_DIR}"
    lines = [
        "**distbench report** "
        f"([report.html]({base}/report.html), [report.md]({base}/report.md), "
        f"artifacts `runs:/{parent_run_id}/{REPORT_ARTIFACT_DIR}/`)",
        "",
        *(f"- {line}" for line in verdict_lines(sections.best)),
    ]
    return "\n".join(lines)


def log_report(
    tracking_uri: str, experiment_id: str, parent_run_id: str, files: list[Path], note: str
) -> None:
    """The report files as artifacts `report/` of the parent run, and its description."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    for path in files:
        client.log_artifact(parent_run_id, str(path), artifact_path=REPORT_ARTIFACT_DIR)
    client.set_tag(parent_run_id, "mlflow.note.content", note)
