"""`distbench report`: a sweep's runs, read back from MLflow, as tables, plots and a verdict.

Pure functions turn a flat DataFrame of runs (one row per child run: `run_id`, `run_name`,
`status`, the tags `strategy`, `world_size`, `zero_stage`, ... and every metric by its bare name)
into pivot tables, the best configuration per metric, the throughput-vs-memory Pareto front,
scaling efficiency and matplotlib figures; `load_runs` is the thin MLflow loader and
`log_report` puts the folder back on the sweep's parent run. Runs without a metric (failed
runs, gemm/collectives workloads) are kept as rows and skipped by what needs the metric.

    distbench report --sweep latest --out report/          # the most recent sweep
    distbench report --sweep <parent run id> --format csv --out report/
    python -c "from distbench.tools.report import *; print(best_per_metric(flat_table(load_runs( \
        'sqlite:///mlflow.db', 'latest')[0])))"
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

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
    "hardware",
    "backend",
    "failure_kind",
    "failure_reason",
    "mfu_error",
)
ID_COLUMNS = ("run_id", "run_name", "status", "start_time", "parent_run_id")
RANK_MEM = re.compile(r"^peak_mem_gib_rank(\d+)$")
PRED_COLUMNS = (
    ("pred_peak_mem_gib", "peak_mem_gib", "mem_pred_rel_err"),
    ("pred_step_time_s", "step_time_s_p50", "time_pred_rel_err"),
)
REPORT_ARTIFACT_DIR = "report"


# --------------------------------------------------------------------------- loading


@dataclass
class Selection:
    """What `load_runs` selected: the runs, the sweep's parent (None for a whole experiment)."""

    runs: list[Any]
    parent_run_id: str | None
    experiment_id: str
    title: str


def _all_runs(client: Any, experiment_id: str) -> list[Any]:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def load_runs(tracking_uri: str, sweep: str | None, experiment: str = "distbench") -> Selection:
    """The child runs of a sweep (`sweep` = a parent run id, or "latest": the most recent run
    without `mlflow.parentRunId` that has children), or every non-parent run of the experiment
    when `sweep` is None. Raises LookupError with a one-line reason when nothing matches."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    if sweep and sweep != "latest":
        from mlflow.exceptions import MlflowException

        try:
            experiment_id = client.get_run(sweep).info.experiment_id
        except MlflowException as exc:
            raise LookupError(f"no run {sweep!r} in {tracking_uri}") from exc
    else:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise LookupError(f"no experiment {experiment!r} in {tracking_uri}")
        experiment_id = found.experiment_id
    runs = _all_runs(client, experiment_id)
    parent_of = {r.info.run_id: r.data.tags.get("mlflow.parentRunId") for r in runs}
    # A resumed sweep's parent also owns the earlier runs it skipped (tagged resumed_into.<id>).
    resumed_into = {
        r.info.run_id: {k[len(RESUMED_INTO_TAG_PREFIX) :] for k in r.data.tags}
        for r in runs
        if any(k.startswith(RESUMED_INTO_TAG_PREFIX) for k in r.data.tags)
    }
    parents = {p for p in parent_of.values() if p} | set().union(*resumed_into.values())
    if sweep is None:
        children = [  # every job's run; `distbench compare` runs are not jobs
            r
            for r in runs
            if r.info.run_id not in parents and r.data.tags.get("distbench.kind") != "compare"
        ]
        name = client.get_experiment(experiment_id).name
        return Selection(children, None, experiment_id, f"experiment {name}")
    if sweep == "latest":
        candidates = [r for r in runs if r.info.run_id in parents and not parent_of[r.info.run_id]]
        if not candidates:
            raise LookupError(f"no sweep (a parent run with children) in experiment {experiment!r}")
        sweep = max(candidates, key=lambda r: r.info.start_time).info.run_id
    parent = client.get_run(sweep)
    children = [
        r
        for r in runs
        if parent_of[r.info.run_id] == sweep or sweep in resumed_into.get(r.info.run_id, ())
    ]
    if not children:
        raise LookupError(f"run {sweep} has no child runs: not a sweep's parent run")
    title = f"sweep {parent.info.run_name} ({sweep})"
    return Selection(children, sweep, experiment_id, title)


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
    """Scaling efficiency vs world size per strategy (1.0 = linear)."""
    eff = scaling_efficiency(df)
    if eff.empty:
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


@dataclass
class Sections:
    title: str
    best: pd.DataFrame
    pivots: list[tuple[str, pd.DataFrame]]
    failed: pd.DataFrame
    pred: pd.DataFrame
    scaling: pd.DataFrame
    plots: list[Path]
    num_runs: int
    num_finished: int


def build_sections(df: pd.DataFrame, out_dir: Path, title: str) -> Sections:
    pivots = [(label, pivot(df, m)) for m, _, label in HEADLINE_METRICS]
    plots = [fn(df, out_dir / name) for name, fn in PLOTS]
    return Sections(
        title=title,
        best=best_per_metric(df),
        pivots=[(label, t) for label, t in pivots if not t.empty],
        failed=failed_runs(df),
        pred=pred_vs_measured(df),
        scaling=scaling_efficiency(df),
        plots=[p for p in plots if p is not None],
        num_runs=len(df),
        num_finished=len(finished(df)),
    )


def render_markdown(s: Sections) -> str:
    parts = [
        f"# distbench report: {s.title}\n",
        f"{s.num_runs} runs, {s.num_finished} finished.\n",
        "## Best configuration per metric\n",
        "\n".join(f"- {line}" for line in verdict_lines(s.best)) or "_no finished run_",
        "",
    ]
    for label, table in s.pivots:
        parts += [f"## {label}\n", markdown_table(table, index=True)]
    parts += ["## Failed runs\n", markdown_table(s.failed)]
    parts += ["## Predicted vs measured\n", markdown_table(s.pred)]
    parts += ["## Scaling efficiency\n", markdown_table(s.scaling)]
    parts += ["## Plots\n"] + [f"![{p.stem}]({p.name})\n" for p in s.plots]
    return "\n".join(parts)


def _html_table(df: pd.DataFrame, index: bool = False) -> str:
    if df.empty:
        return "<p><em>none</em></p>"
    return df.to_html(index=index, na_rep="-", float_format=lambda v: f"{v:.4g}", border=0)


def render_html(s: Sections) -> str:
    esc = html.escape
    body = [f"<h1>distbench report: {esc(s.title)}</h1>", "<h2>Best configuration per metric</h2>"]
    body.append("<ul>" + "".join(f"<li>{esc(x)}</li>" for x in verdict_lines(s.best)) + "</ul>")
    for label, table in s.pivots:
        body += [f"<h2>{esc(label)}</h2>", _html_table(table, index=True)]
    body += ["<h2>Failed runs</h2>", _html_table(s.failed)]
    body += ["<h2>Predicted vs measured</h2>", _html_table(s.pred)]
    body += ["<h2>Scaling efficiency</h2>", _html_table(s.scaling)]
    body += ["<h2>Plots</h2>"] + [
        f'<p><img src="{esc(p.name)}" alt="{p.stem}"></p>' for p in s.plots
    ]
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}img{max-width:100%}"
    )
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{esc(s.title)}</title>'
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n"
    )


def write_csv(df: pd.DataFrame, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "runs.csv"
    df.to_csv(path, index=False)
    return path


def write_report(df: pd.DataFrame, out_dir: Path, title: str) -> tuple[list[Path], Sections]:
    """report.md, report.html, runs.csv and the PNG plots in out_dir; returns the files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = build_sections(df, out_dir, title)
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
