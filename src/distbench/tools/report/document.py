"""The report as one document: its sections (tables, views, plots; `build_sections`) and their
markdown (`render_markdown`); html.py renders the same sections as a page.

    python -c "from distbench.tools.report.document import NO_SCALING; print(NO_SCALING)"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from distbench.figures.sweep_accuracy import accuracy_lines
from distbench.tools.report.plots import PLOTS, plot_pred_error_history
from distbench.tools.report.tables import (
    best_per_metric,
    failed_runs,
    finished,
    grid_table,
    pred_error_history,
    pred_error_summary,
    pred_vs_measured,
    scales,
    scaling_efficiency,
)
from distbench.tools.report.views import (
    TableView,
    constant_line,
    grid_view,
    markdown_view,
    table_view,
    verdict_lines,
)

# Rows of the per-run prediction-error table (the newest; the plot shows them all).
MAX_PRED_HISTORY_ROWS = 30


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
    # how well these runs were predicted together (figures/sweep_accuracy.py), a line per kind
    pred_accuracy: list[str]
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
        pred_accuracy=accuracy_lines(finished(df).to_dict("records")),
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
BEST_MARK_NOTE = (
    "In bold: the best of each metric among comparable runs: the same tokens per step, and "
    "for a whole-job figure (step time, tokens/s) the same world size."
)
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
        *([f"_{constant_line(s.grid)}._\n"] if constant_line(s.grid) else []),
        f"_{BEST_MARK_NOTE}_\n",
        "## Failed runs\n",
        markdown_view(views["failed"]),
        "## Predicted vs measured\n",
        *[f"- {line}" for line in s.pred_accuracy],
        *([""] if s.pred_accuracy else []),
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
