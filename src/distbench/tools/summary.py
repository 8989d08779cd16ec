"""The end-of-sweep comparison table, built from each job's outcome.json (not from logs): the
step time's p50, p90 and spread (identical sweeps minutes apart can differ by 20 %), and only
the columns that apply to the sweep's jobs: the metrics its workloads declare with a column
header (WorkloadSpec.metrics; distbench.workloads.metric_catalog), a plug-in's too. A
collectives job's nccl-tests table (its job dir's collectives.txt) is printed before it. A
sweep read back from MLflow (`distbench summary latest`, a parent run id or name) whose dir is
not on this machine is shown from its child runs instead (`outcomes_of_runs`: no skipped jobs,
no nccl-tests tables).

python -m distbench.tools.summary multirun/2026-11-22/10-00-00    # reprint a sweep's table
distbench summary latest     # the same for the newest sweep in MLflow (its dir when it is here)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from distbench.workloads import MetricSpec, metric_catalog, registry

# The table's own derived column, shown right after the metric it is derived from:
# (p90 - p50) / p50 of the step time (table_metrics adds it; it is not logged).
SPREAD = MetricSpec(
    "step_time_s_spread_pct", "%", "min", "step time spread (%)", ".0f", column="spread %"
)
DERIVED_AFTER = {"step_time_s_p90": SPREAD}
# Printed before the table for each FINISHED collectives job (workloads/collectives/workload.py).
NCCL_TABLE_FILE = "collectives.txt"


# The first-step loss against the single-device reference (distbench.workloads.train.equivalence).
EQUIVALENT = {"true": "[green]yes[/green]", "false": "[red]NO[/red]", "unchecked": "?"}


def largest_fitting_batches(outcomes: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """For each (strategy, world_size) whose sweep hit an OOM: the largest micro batch that
    finished (the batch-size scan's answer)."""
    oom_groups = {
        (o["strategy"], o["world_size"]) for o in outcomes if o.get("failure_kind") == "oom"
    }
    largest = {}
    for o in outcomes:
        group = (o["strategy"], o["world_size"])
        if group in oom_groups and o["status"] == "FINISHED" and "micro_batch_size" in o:
            largest[group] = max(largest.get(group, 0), o["micro_batch_size"])
    return largest


def load_outcomes(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every job's outcome in job order (Hydra names job dirs 0, 1, 2, ...)."""
    paths = sorted(
        sweep_dir.glob("*/outcome.json"), key=lambda p: (len(p.parent.name), p.parent.name)
    )
    return [json.loads(p.read_text()) for p in paths]


# Run tags that an outcome carries under the same name (orchestrator.NAME_TAGS and
# TAGGED_OUTCOME_KEYS), and the flattened param of the micro batch (the batch-size scan).
OUTCOME_TAGS = (
    "strategy",
    "world_size",
    "zero_stage",
    "model",
    "workload",
    "failure_kind",
    "failure_reason",
    "equivalent",
)
MICRO_BATCH_PARAM = "batch.micro_batch_size"


def outcome_of_run(run: Any) -> dict[str, Any]:
    """A job's outcome as far as its MLflow run tells it: status, metrics, the tags above, its
    job dir (tag distbench.job_dir) and micro batch."""
    tags, params = run.data.tags, run.data.params
    outcome: dict[str, Any] = {k: tags[k] for k in OUTCOME_TAGS if k in tags}
    outcome.update(
        job=run.info.run_name,
        run_name=run.info.run_name,
        run_id=run.info.run_id,
        status=run.info.status,
        metrics=dict(run.data.metrics),
    )
    if tags.get("distbench.job_dir"):
        outcome["job_dir"] = tags["distbench.job_dir"]
    if str(params.get(MICRO_BATCH_PARAM, "")).isdigit():
        outcome["micro_batch_size"] = int(params[MICRO_BATCH_PARAM])
    for key in ("strategy", "world_size", "zero_stage"):
        outcome.setdefault(key, "-")
    return outcome


def outcomes_of_runs(runs: list[Any]) -> list[dict[str, Any]]:
    """The outcomes of a sweep's child runs, in the order they started (the job order)."""
    ordered = sorted(runs, key=lambda r: (r.info.start_time or 0, r.info.run_name or ""))
    return [outcome_of_run(r) for r in ordered]


def table_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """A job's metrics with the table's derived ones added (step_time_s_spread_pct)."""
    out = dict(metrics)
    from distbench.figures.metrics import step_spread_pct

    spread = step_spread_pct(metrics)
    if spread is not None:
        out["step_time_s_spread_pct"] = spread
    return out


def metric_columns(
    outcomes: list[dict[str, Any]], shown: list[dict[str, float]]
) -> list[MetricSpec]:
    """The metric columns of a sweep's table: the metrics with a column header (MetricSpec.column)
    that some job has, in the order its workloads declare them (by job order), then any other
    the catalogue knows (a workload not registered here); a train sweep shows no GEMM column."""
    specs = registry()
    declared = [m for o in outcomes for m in getattr(specs.get(o.get("workload")), "metrics", ())]
    columns: dict[str, MetricSpec] = {}
    for metric in [*declared, *metric_catalog().values()]:
        if metric.column and metric.name not in columns:
            columns[metric.name] = metric
            if metric.name in DERIVED_AFTER:
                columns[DERIVED_AFTER[metric.name].name] = DERIVED_AFTER[metric.name]
    return [c for c in columns.values() if any(c.name in m for m in shown)]


def row_name(outcome: dict[str, Any]) -> str:
    """What the table names a job: its strategy when the strategy alone says what ran (a raw
    workload, whose strategy tag is its own name, or a workload `named_by_strategy`), else
    "<workload>/<strategy>" (inference/dp)."""
    strategy, workload = outcome["strategy"], outcome.get("workload")
    spec = registry().get(workload) if workload else None
    if workload in (None, strategy) or (spec is not None and spec.named_by_strategy):
        return strategy
    return f"{workload}/{strategy}"


def _cell(metrics: dict[str, float], metric: MetricSpec) -> str:
    return format(metrics[metric.name], metric.fmt) if metric.name in metrics else "-"


def _trains_a_model(outcome: dict[str, Any]) -> bool:
    """Whether a job has a ZeRO stage and an equivalence check to show (raw workloads such as
    gemm and collectives have neither: their model is `none`)."""
    return outcome.get("model") != "none"


def summary_table(outcomes: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=title)
    shown = [table_metrics(o.get("metrics", {})) for o in outcomes]
    columns = metric_columns(outcomes, shown)
    models = any(_trains_a_model(o) for o in outcomes)  # else no zero / = single columns
    headers = ["strategy", "world", *(["zero"] if models else []), "status"]
    headers += [c.column or c.label for c in columns] + (["= single"] if models else [])
    for header in headers:
        left = header in ("strategy", "status")
        # the status is read whole ("SKIPPED (earlier FINISHED)"): numbers wrap, not it
        table.add_column(header, justify="left" if left else "right", no_wrap=header == "status")
    for o, metrics in zip(outcomes, shown, strict=True):
        earlier = o.get("previous_status", "resume")  # a skipped job shows its earlier run
        status = {
            "FINISHED": "[green]FINISHED[/green]",
            "SKIPPED": f"[yellow]SKIPPED[/yellow] (earlier {earlier})",
        }.get(o["status"], f"[red]{o['status']}[/red] {o.get('failure_kind') or ''}".strip())
        cells = [_cell(metrics, c) for c in columns]
        name = row_name(o)
        equivalent = EQUIVALENT.get(o.get("equivalent"), "-")
        if models:
            table.add_row(name, o["world_size"], o["zero_stage"], status, *cells, equivalent)
        else:
            table.add_row(name, o["world_size"], status, *cells)
    return table


def nccl_tables(outcomes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(heading, nccl-tests table) of each FINISHED job that wrote one (workload=collectives)."""
    out = []
    for o in outcomes:
        path = Path(o.get("job_dir", "")) / NCCL_TABLE_FILE
        if o["status"] == "FINISHED" and o.get("job_dir") and path.is_file():
            heading = f"{o['job']} {o.get('workload')} world_size={o['world_size']} ({path}):"
            out.append((heading, path.read_text()))
    return out


def print_summary(
    outcomes: list[dict[str, Any]], title: str, mlflow_url: str | None = None
) -> None:
    console = Console(width=max(Console().width, 140))
    for heading, text in nccl_tables(outcomes):
        console.print(heading, highlight=False, markup=False)
        console.print(text, highlight=False, markup=False, soft_wrap=True, end="")
    console.print(summary_table(outcomes, title))
    for o in outcomes:
        if o["status"] == "FAILED":
            console.print(
                f"  {o['job']} {o['strategy']} ws={o['world_size']}: "
                f"{o.get('failure_kind')}: {o.get('failure_reason')}",
                highlight=False,
            )
    for (strategy, world_size), mbs in largest_fitting_batches(outcomes).items():
        console.print(
            f"  largest batch.micro_batch_size that fits: {mbs} "
            f"({strategy}, world_size {world_size})",
            highlight=False,
        )
    if mlflow_url:
        console.print(f"MLflow runs: {mlflow_url}   (open it with: distbench ui)", highlight=False)


if __name__ == "__main__":
    print_summary(load_outcomes(Path(sys.argv[1])), title=sys.argv[1])
