"""The end-of-sweep comparison table, built from each job's outcome.json (not from logs): what ran
(the strategy, the sweep's other varied keys, the world size, the layout `dp×tp×pp`, the ZeRO
stage, the tokens per optimizer step), then the step time's p50, p90 and spread (identical
sweeps minutes apart can differ by 20 %) and only the metrics that apply to the sweep's jobs:
those its workloads declare with a column header (WorkloadSpec.metrics;
distbench.workloads.metric_catalog), a plug-in's too. Columns whose every row says the same move
to the caption; the table fits the terminal (tools/columns.py: low-priority metrics are hidden
when it is narrow). Runs that differ in tokens per step are not comparable in step time or
tokens/s (figures/fair.py), and the caption says so. A collectives job's nccl-tests table (its
job dir's collectives.txt) is printed before it. A sweep read back from MLflow (`distbench
summary latest`, a parent run id or name) whose dir is not on this machine is shown from its
child runs instead (`outcomes_of_runs`: no skipped jobs, no nccl-tests tables). A sweep still
running shows its running jobs (tools/sweep_state.py) and how many are pending.

python -m distbench.tools.summary multirun/2026-11-22/10-00-00    # reprint a sweep's table
distbench summary latest     # the same for the newest sweep in MLflow (its dir when it is here)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from distbench.figures.fair import (
    layout_of,
    layout_of_params,
    tokens_of_params,
    tokens_per_step_of,
    tokens_text,
)
from distbench.figures.sweep_accuracy import accuracy_lines
from distbench.tools.columns import (
    KEEP,
    Col,
    fitted_table,
    job_overrides,
    short_headers,
    split_constant,
    terminal_width,
    varied_keys,
)
from distbench.tools.sweep_state import load_outcomes, pending_text  # load_outcomes: re-exported
from distbench.workloads import MetricSpec, counts_batch_tokens, metric_catalog, registry

# The table's own derived column, shown right after the metric it is derived from:
# (p90 - p50) / p50 of the step time (table_metrics adds it; it is not logged).
SPREAD = MetricSpec(
    "step_time_s_spread_pct", "%", "min", "step time spread (%)", ".0f", column="spread %"
)
DERIVED_AFTER = {"step_time_s_p90": SPREAD}
# Printed before the table for each FINISHED collectives job (workloads/collectives/workload.py).
NCCL_TABLE_FILE = "collectives.txt"
# The keys the name, world size and ZeRO columns show: never a varied-key column of their own.
SHOWN_KEYS = frozenset({"strategy", "world_size", "zero_stage", "workload"})
# Headers of what ran; those in MOVABLE go to the caption when every row says the same.
NAME, WORLD, LAYOUT, ZERO, TOKENS, STATUS, SINGLE = (
    "strategy",
    "ws",
    "dp×tp×pp",
    "zero",
    "tok/step",
    "status",
    "= single",
)
MOVABLE = frozenset({WORLD, ZERO, STATUS, SINGLE})
# Which metric columns stay longest in a narrow terminal (higher stays); another headline metric
# gets 3, any other metric 1 (tools/columns.py drops the lowest first).
METRIC_PRIORITY = {
    "step_time_s_p50": 8,
    "throughput_tokens_per_s": 8,
    "peak_mem_gib": 6,
    "mfu_pct": 5,
    "tflops_per_device": 4,
}


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


# Run tags that an outcome carries under the same name (orchestrator.NAME_TAGS and
# TAGGED_OUTCOME_KEYS, train's layout_tag), and the flattened params of the micro batch (the
# batch-size scan) and of the layout.
OUTCOME_TAGS = (
    "strategy",
    "world_size",
    "zero_stage",
    "model",
    "workload",
    "failure_kind",
    "failure_reason",
    "equivalent",
    "layout_tag",
)
MICRO_BATCH_PARAM = "batch.micro_batch_size"


def outcome_of_run(run: Any, swept: Sequence[str] = ()) -> dict[str, Any]:
    """A job's outcome as far as its MLflow run tells it: status, metrics, the tags above, its
    job dir (tag distbench.job_dir), micro batch, layout and tokens per step (from its params
    when it logged no tokens_per_step), and its values of the sweep's `swept` keys."""
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
    if layout_of_params(params):
        outcome["layout"] = layout_of_params(params)
    tokens = tokens_of_params(params, counts_batch_tokens(params.get("workload.name")))
    if tokens:
        outcome["tokens_per_step"] = tokens
    outcome["swept"] = {
        key: params.get(key, params.get(f"{key}.name", tags.get(key, "-"))) for key in swept
    }
    for key in ("strategy", "world_size", "zero_stage"):
        outcome.setdefault(key, "-")
    return outcome


def outcomes_of_runs(runs: list[Any], swept: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The outcomes of a sweep's child runs, in the order they started (the job order); `swept`:
    the keys the sweep varies (its parent run's params)."""
    ordered = sorted(runs, key=lambda r: (r.info.start_time or 0, r.info.run_name or ""))
    return [outcome_of_run(r, swept) for r in ordered]


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


def row_tokens(outcome: dict[str, Any]) -> float | None:
    """A job's tokens per optimizer step: its metric, else what its params or config say."""
    return tokens_per_step_of(outcome.get("metrics") or {}) or outcome.get("tokens_per_step")


def status_cell(outcome: dict[str, Any]) -> str:
    status = outcome["status"]
    earlier = outcome.get("previous_status", "resume")  # a skipped job shows its earlier run
    return {
        "FINISHED": "[green]FINISHED[/green]",
        "SKIPPED": f"[yellow]SKIPPED[/yellow] (earlier {earlier})",
        "RUNNING": f"[cyan]RUNNING[/cyan] {outcome.get('progress', '')}".strip(),
    }.get(status, f"[red]{status}[/red] {outcome.get('failure_kind') or ''}".strip())


def swept_of(outcome: dict[str, Any]) -> dict[str, str]:
    """A job's values of what its sweep varies: from MLflow (`swept`) or its overrides."""
    return outcome.get("swept") or job_overrides(outcome.get("job_dir"))


def config_columns(outcomes: list[dict[str, Any]]) -> list[Col]:
    """The columns that say what ran: name, varied keys, world size, layout, ZeRO stage, tokens
    per step, status."""
    models = any(_trains_a_model(o) for o in outcomes)  # else no zero column
    tokens = [row_tokens(o) for o in outcomes]  # none for gemm, collectives: no column
    per_job = [swept_of(o) for o in outcomes]
    varied = varied_keys(per_job, SHOWN_KEYS)
    headers = short_headers(varied)
    cols = [Col(NAME, [row_name(o) for o in outcomes], "left", KEEP)]
    cols += [Col(headers[k], [str(v.get(k, "-")) for v in per_job], "left", 5) for k in varied]
    cols += [
        Col(WORLD, [str(o.get("world_size", "-")) for o in outcomes], "right", KEEP),
        Col(LAYOUT, [layout_of(o) or "-" for o in outcomes], "right", KEEP),
        *(
            [Col(ZERO, [str(o.get("zero_stage", "-")) for o in outcomes], "right", 5)]
            if models
            else []
        ),
        *([Col(TOKENS, [tokens_text(t) for t in tokens], "right", KEEP)] * any(tokens)),
        Col(STATUS, [status_cell(o) for o in outcomes], "left", KEEP),
    ]
    return cols


def summary_columns(outcomes: list[dict[str, Any]]) -> list[Col]:
    """Every column of a sweep's table, before fitting: what ran, the metrics (headline ones
    kept longest), the equivalence check."""
    shown = [table_metrics(o.get("metrics") or {}) for o in outcomes]
    cols = config_columns(outcomes)
    for metric in metric_columns(outcomes, shown):
        cells = [_cell(m, metric) for m in shown]
        priority = METRIC_PRIORITY.get(metric.name, 3 if metric.headline else 1)
        cols.append(Col(metric.column or metric.label, cells, "right", priority))
    if any(_trains_a_model(o) for o in outcomes):
        cells = [EQUIVALENT.get(o.get("equivalent"), "-") for o in outcomes]
        cols.append(Col(SINGLE, cells, "right", 2))
    return cols


def summary_notes(outcomes: list[dict[str, Any]], constant: list[tuple[str, str]]) -> list[str]:
    """The caption: what every row shares, and whether their tokens per step differ."""
    from distbench.figures.fair import tokens_differ

    notes = []
    said = [(h, v) for h, v in constant if v != "-"]
    if said:
        notes.append("every row: " + ", ".join(f"{h} {v}" for h, v in said))
    tokens = [row_tokens(o) for o in outcomes]
    if tokens_differ(tokens):
        notes.append(
            "tok/step differs: compare step time and tokens/s only between rows of the same ws "
            "and tok/step"
        )
        if all(counts_batch_tokens(o.get("workload")) for o in outcomes):
            most = max(t for t in tokens if t is not None)
            notes[-1] += f"; batch.global_batch_tokens={most:.0f} runs all at one global batch"
    return notes


def summary_table(outcomes: list[dict[str, Any]], title: str, width: int | None = None) -> Any:
    """The sweep's table fitted to `width` (default: the terminal's, tools/columns.py)."""
    cols, constant = split_constant(summary_columns(outcomes), MOVABLE)
    notes = summary_notes(outcomes, constant)
    table, _ = fitted_table(cols, width or terminal_width(), title, notes)
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
    outcomes: list[dict[str, Any]],
    title: str,
    mlflow_url: str | None = None,
    pending: int | None = None,
) -> None:
    """The nccl-tests tables, the sweep's table, failures, batch-scan answers and the MLflow
    link; `pending`: jobs of a running sweep not started yet."""
    width = terminal_width()
    console = Console(width=width)
    for heading, text in nccl_tables(outcomes):
        console.print(heading, highlight=False, markup=False)
        console.print(text, highlight=False, markup=False, soft_wrap=True, end="")
    console.print(summary_table(outcomes, title, width))
    finished = [o.get("metrics") or {} for o in outcomes if o["status"] == "FINISHED"]
    for line in accuracy_lines(finished):
        console.print(f"  {line}", highlight=False)
    if pending or any(o["status"] == "RUNNING" for o in outcomes):
        console.print(pending_text(outcomes, pending), highlight=False)
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
        line = f"MLflow runs: {mlflow_url}   (open it with: distbench ui)"
        console.print(line, highlight=False, soft_wrap=True)  # a URL is never broken in two


if __name__ == "__main__":
    print_summary(load_outcomes(Path(sys.argv[1])), title=sys.argv[1])
