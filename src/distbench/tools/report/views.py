"""The report's tables as documents show them: every value formatted ('-' when missing), a
`TableView` of cells (text, link, best of its column) for the markdown and the HTML page, the
grid's run links to the MLflow UI and the verdict lines. Pure; no pandas in the templates.

    python -c "from distbench.tools.report.views import *; print(run_link('1', 'abc'))"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from distbench.figures.fair import tokens_text
from distbench.tools.report.tables import best_rows, headline_metrics

# The grid's headers for its configuration columns (metrics carry their MetricSpec label).
GRID_LABELS = {"run_name": "run", "layout": "dp×tp×pp", "tokens_per_step": "tokens/step"}


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
    """One line per comparison group and headline metric (tables.best_per_metric): its best
    run, e.g. `best throughput (tokens/s) (max): …`, and first, where the runs do not all
    compare, the line that says how they were grouped (tables.comparison_note)."""
    if best.empty:
        return []
    groups = best.groupby("metric")["group"].nunique() if "group" in best else None
    lines = [best.attrs["note"]] if best.attrs.get("note") else []
    for r in best.itertuples():
        fair = ""
        if isinstance(getattr(r, "layout", None), str):
            fair += f" layout={r.layout}"
        if _known(getattr(r, "tokens_per_step", None)):
            fair += f" tokens/step={tokens_text(r.tokens_per_step)}"
        among = f" among {r.group}" if groups is not None and groups.get(r.metric, 1) > 1 else ""
        lines.append(
            f"best {r.label} ({r.goal}): {_fmt(r.value)}  {r.run_name}"
            f"  (strategy={r.strategy} world_size={_fmt(r.world_size)} zero_stage={r.zero_stage}"
            f"{fair}){among}"
        )
    return lines


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and np.isnan(value))


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
            text = tokens_text(row[col]) if col == "tokens_per_step" and _known(row[col]) else None
            cells.append(Cell(text or _fmt(row[col]), href, i in best.get(col, ())))
        rows.append(cells)
    labels = {m.name: m.label for m in headline_metrics()} | GRID_LABELS
    return TableView([labels.get(c, c) for c in shown], rows)


def constant_line(grid: pd.DataFrame) -> str:
    """What every run of the grid shares (the columns grid_table moved out), as one sentence;
    empty when nothing is."""
    constant = grid.attrs.get("constant") or {}
    labels = GRID_LABELS
    return (
        "Every run: " + ", ".join(f"{labels.get(k, k)} {_fmt(v)}" for k, v in constant.items())
        if constant
        else ""
    )


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
