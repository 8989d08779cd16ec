"""`distbench compare`'s result logged as its own MLflow run (tools/compare.py holds the rule):
tag `distbench.kind=compare`, params `baseline_run_id`, `candidate_run_id`, `threshold_pct`,
`single_run_noise_pct`, `metrics`; metrics `num_regressions`, `num_configs_regressed`,
`num_configs_compared`, `num_configs_unjudged`; the table as artifacts `compare/compare.md` and
`compare/compare.csv`; the candidate's parent run tagged `distbench.compare_run_id` and
`distbench.num_regressions`.

    distbench compare --baseline previous      # logs the comparison unless --no-log
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from distbench.tools.compare import (
    COMPARE_ARTIFACT_DIR,
    KIND_TAG,
    SINGLE_RUN_NOISE_PCT,
    Row,
    compared_configs,
    regressed_configs,
    summary_line,
    to_frame,
    unjudged_configs,
)
from distbench.tools.report.views import markdown_table
from distbench.tracking.live import now_ms
from distbench.tracking.mlflow_store import retry


def log_comparison(
    tracking_uri: str,
    experiment_id: str,
    baseline_run_id: str,
    candidate_run_id: str,
    rows: Sequence[Row],
    metrics: Sequence[str],
    threshold_pct: float,
    single_run_noise_pct: float = SINGLE_RUN_NOISE_PCT,
) -> str:
    """The comparison as its own run (see the module docstring); returns its id."""
    from distbench.tracking.mlflow_store import client

    mlflow = client(tracking_uri)
    bad = regressed_configs(rows)
    verdict = "regression" if bad else "pass"
    run_id = _create_compare_run(mlflow, experiment_id, baseline_run_id, candidate_run_id, bad)
    heading = f"# distbench compare: candidate {candidate_run_id} vs baseline {baseline_run_id}"
    _log_tables(mlflow, run_id, rows, heading, threshold_pct)
    params = {
        "baseline_run_id": baseline_run_id,
        "candidate_run_id": candidate_run_id,
        "threshold_pct": f"{threshold_pct:g}",
        "single_run_noise_pct": f"{single_run_noise_pct:g}",
        "metrics": ",".join(metrics),
    }
    values = comparison_counts(rows)
    _log_values(mlflow, run_id, params, values)
    note = f"**distbench compare**: {verdict}; {summary_line(rows, threshold_pct)}"
    retry(lambda: mlflow.set_tag(run_id, "mlflow.note.content", note))
    retry(lambda: mlflow.set_terminated(run_id, "FINISHED"))
    _tag_candidate(mlflow, candidate_run_id, run_id, values["num_regressions"])
    return run_id


def comparison_counts(rows: Sequence[Row]) -> dict[str, int]:
    """The comparison run's metrics: regressions, configurations regressed and compared."""
    return {
        "num_regressions": sum(r.regression for r in rows),
        "num_configs_regressed": len(regressed_configs(rows)),
        "num_configs_compared": len(compared_configs(rows)),
        "num_configs_unjudged": len(unjudged_configs(rows)),
    }


def _create_compare_run(
    mlflow: Any, experiment_id: str, baseline_run_id: str, candidate_run_id: str, bad: list[str]
) -> str:
    """A RUNNING run `compare-<candidate>-vs-<baseline>` tagged with its kind and verdict."""
    run = retry(
        lambda: mlflow.create_run(
            experiment_id,
            run_name=f"compare-{candidate_run_id[:8]}-vs-{baseline_run_id[:8]}",
            tags={
                KIND_TAG: "compare",
                "distbench.compare.verdict": "regression" if bad else "pass",
                "distbench.compare.regressed": ", ".join(bad)[:5000],
            },
        )
    )
    return run.info.run_id


def _log_tables(
    mlflow: Any, run_id: str, rows: Sequence[Row], heading: str, threshold_pct: float
) -> None:
    """The table as artifacts compare/compare.md (with the summary line) and compare/compare.csv."""
    frame = to_frame(rows)
    with tempfile.TemporaryDirectory() as tmp:
        md = Path(tmp) / "compare.md"
        md.write_text(
            f"{heading}\n\n{summary_line(rows, threshold_pct)}\n\n{markdown_table(frame)}"
        )
        csv = Path(tmp) / "compare.csv"
        frame.to_csv(csv, index=False)
        for path in (md, csv):
            retry(lambda p=path: mlflow.log_artifact(run_id, str(p), COMPARE_ARTIFACT_DIR))


def _log_values(mlflow: Any, run_id: str, params: dict[str, str], values: dict[str, int]) -> None:
    from mlflow.entities import Metric, Param

    logged_ms = now_ms()
    retry(
        lambda: mlflow.log_batch(
            run_id,
            params=[Param(k, v) for k, v in params.items()],
            metrics=[Metric(k, float(v), logged_ms, 0) for k, v in values.items()],
        )
    )


def _tag_candidate(mlflow: Any, candidate_run_id: str, run_id: str, num_regressions: int) -> None:
    """The candidate sweep's parent names its comparison and its number of regressions."""
    retry(lambda: mlflow.set_tag(candidate_run_id, "distbench.compare_run_id", run_id))
    retry(
        lambda: mlflow.set_tag(candidate_run_id, "distbench.num_regressions", str(num_regressions))
    )
