"""The end-of-sweep comparison table, built from each job's outcome.json (not from logs).

python -m distbench.tools.summary multirun/2026-11-22/10-00-00    # reprint a sweep's table
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

COLUMNS = (
    # header, metric key, format
    ("step p50 (s)", "step_time_s_p50", "{:.3f}"),
    ("TTFT (s)", "time_to_first_token_s", "{:.3f}"),  # workload=inference
    ("decode tok/s", "decode_tokens_per_s", "{:,.0f}"),  # workload=inference
    ("tokens/s", "throughput_tokens_per_s", "{:,.0f}"),
    ("TFLOP/s/dev", "tflops_per_device", "{:.4f}"),
    ("MFU %", "mfu_pct", "{:.2f}"),
    ("peak mem (GiB)", "peak_mem_gib", "{:.2f}"),
    ("$/1M tok", "cost_usd_per_1m_tokens", "{:.4f}"),
    ("gemm p50 (s)", "gemm_time_s_p50", "{:.4f}"),  # workload=gemm
    ("AR busbw (GB/s)", "busbw_gbps_peak.all_reduce", "{:.3f}"),  # workload=collectives
)


# The first-step loss against the single-device reference (distbench.figures.equivalence).
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


def _cell(metrics: dict[str, float], key: str, fmt: str) -> str:
    return fmt.format(metrics[key]) if key in metrics else "-"


def summary_table(outcomes: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=title)
    # only the metric columns some job has: a train sweep shows no GEMM column, and so on
    columns = [c for c in COLUMNS if any(c[1] in o.get("metrics", {}) for o in outcomes)]
    for header in ("strategy", "world", "zero", "status", *(c[0] for c in columns), "= single"):
        left = header in ("strategy", "status")
        # the status is read whole ("SKIPPED (earlier FINISHED)"): numbers wrap, not it
        table.add_column(header, justify="left" if left else "right", no_wrap=header == "status")
    for o in outcomes:
        earlier = o.get("previous_status", "resume")  # a skipped job shows its earlier run
        status = {
            "FINISHED": "[green]FINISHED[/green]",
            "SKIPPED": f"[yellow]SKIPPED[/yellow] (earlier {earlier})",
        }.get(o["status"], f"[red]FAILED[/red] {o.get('failure_kind')}")
        metrics = o.get("metrics", {})
        cells = [_cell(metrics, key, fmt) for _, key, fmt in columns]
        # raw workloads (gemm, collectives) have no strategy: describe() tags the workload
        name = (
            o["strategy"]
            if o.get("workload", "train") in ("train", o["strategy"])
            else (f"{o['workload']}/{o['strategy']}")
        )
        equivalent = EQUIVALENT.get(o.get("equivalent"), "-")
        table.add_row(name, o["world_size"], o["zero_stage"], status, *cells, equivalent)
    return table


def print_summary(
    outcomes: list[dict[str, Any]], title: str, mlflow_url: str | None = None
) -> None:
    console = Console(width=max(Console().width, 140))
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
