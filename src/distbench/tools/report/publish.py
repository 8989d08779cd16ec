"""The report's files and where they go: report.md, report.html, runs.csv and the plots in a
folder (`write_report`), then, for a sweep, as artifacts `report/` of its parent run with the
verdict as the run's description (`log_report`).

    distbench report --sweep latest --out report/     # writes, then logs on the parent run
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from distbench.tools.report.document import Sections, build_sections, render_markdown
from distbench.tools.report.html import render_html
from distbench.tools.report.views import verdict_lines

REPORT_ARTIFACT_DIR = "report"


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
