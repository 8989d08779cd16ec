"""A plan and a layout search as the terminal shows them (rich tables that fit the terminal,
tools/columns.py; the notes under them, tools/plan/advice.py) and as `--json` prints them
(tools/plan/; the JSON fields are in tools/plan/__init__.py). Each row shows its layout
(`dp×tp×pp`), its tokens per step, and the memory the fit compares against the device's with
the margin left (`need / dev GiB`, `free GiB`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from distbench.figures.fair import layout_label, tokens_text
from distbench.figures.metrics import GIB
from distbench.figures.pred_error import with_error
from distbench.tools.columns import KEEP, Col, fitted_table, terminal_width
from distbench.tools.plan.advice import (
    memory_cells,
    refusal_counts,
    run_command,
    tokens_note,
)

if TYPE_CHECKING:
    from rich.console import Console

    from distbench.figures.predict import Prediction
    from distbench.tools.plan.search import Search
    from distbench.tools.plan.strategies import Plan

PLAN_HEADERS = (
    "strategy",
    "dp×tp×pp",
    "zero",
    "ckpt",
    "tok/step",
    "params",
    "grads",
    "optim",
    "buffers",
    "activ",
    "total GiB",
    "need / dev GiB",
    "free GiB",
    "comm GB/step",
    "step s",
    "tokens/s",
    "$/1M tok",
)
# Which columns a narrow terminal keeps longest (higher stays; tools/columns.py); the memory
# terms go first, then cost and communication.
PLAN_PRIORITY = {
    "strategy": KEEP,
    "dp×tp×pp": KEEP,
    "tok/step": KEEP,
    "free GiB": 8,
    "step s": 8,
    "tokens/s": 8,
    "need / dev GiB": 7,
    "zero": 6,
    "ckpt": 6,
    "total GiB": 4,
    "comm GB/step": 3,
    "$/1M tok": 2,
}
SEARCH_HEADERS = (
    "#",
    "layout",
    "tok/step",
    "total GiB",
    "free GiB",
    "step s",
    "tokens/s",
    "comm GB/step",
    "$/1M tok",
)


def plan_json(plan: Plan) -> list[dict[str, Any]]:
    """The `--json` document: predictions, then the recommendation object (module docstring)."""
    rows = [
        {
            **p.as_dict(),
            "recommended": p.strategy == plan.recommendation,
            "pred_error": {k: b.as_dict() for k, b in plan.error_bars.get(p.strategy, {}).items()},
        }
        for p in plan.predictions
    ]
    rows.append(
        {
            "recommendation": plan.recommendation,
            "calibrated": plan.calibrated,
            "history": plan.history,
            "sources": plan.extra.get("sources", {}),
            "links": plan.extra.get("links", ""),
            "reason": plan.reason,
            "refused": plan.refused,
            "hardware": plan.hardware,
            "warnings": plan.extra.get("warnings", []),
        }
    )
    return rows


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def plan_rows(plan: Plan) -> list[list[str]]:
    """Each prediction's cells, in PLAN_HEADERS' order (the recommendation starred)."""
    rows = []
    for p in plan.predictions:
        mem, layout = p.mem, p.layout
        name = f"[bold]{p.strategy} ★[/bold]" if p.strategy == plan.recommendation else p.strategy
        bars = plan.error_bars.get(p.strategy, {})
        rows.append(
            [
                name,
                layout_label(layout.dp, layout.tp, layout.pp),
                "-" if layout.zero_stage is None else str(layout.zero_stage),
                checkpointing_label(p.assumptions),
                tokens_text(p.num_tokens_per_step),
                *(
                    f"{v / GIB:.2f}"
                    for v in (mem.params, mem.grads, mem.optimizer, mem.buffers, mem.activations)
                ),
                with_error(f"{mem.total / GIB:.2f}", bars.get("mem")),
                *memory_cells(p),
                f"{p.comm_bytes_per_step / 1e9:,.3g}",
                with_error(_fmt(p.step_time_s, "{:.3g}"), bars.get("time")),
                _fmt(p.tokens_per_s, "{:,.0f}"),
                _fmt(p.cost_usd_per_1m_tokens, "{:.4g}"),
            ]
        )
    return rows


def plan_table(plan: Plan, width: int | None = None) -> Any:
    """The plan's rows as a table that fits `width` (default: the terminal's)."""
    cal = " cal." if plan.calibrated else ""
    title = plan.title + (" (calibrated by the error bars)" if cal else "")
    rows = plan_rows(plan)
    cols = [
        Col(
            header + (cal if header in ("total GiB", "step s") else ""),
            [row[i] for row in rows],
            "left" if header == "strategy" else "right",
            PLAN_PRIORITY.get(header, 1),
        )
        for i, header in enumerate(PLAN_HEADERS)
    ]
    table, _ = fitted_table(cols, width or terminal_width(), title)
    return table


def checkpointing_label(assumptions: dict[str, Any]) -> str:
    """A row's activation checkpointing: none, full, or sel/k (every k-th layer)."""
    mode = assumptions.get("activation_checkpointing", "none")
    every = assumptions.get("activation_checkpointing_every")
    return f"sel/{every}" if mode == "selective" else mode


def print_plan(plan: Plan, overrides: Sequence[str] = ()) -> None:
    """The table, what it assumes, the host RAM offload needs, the notes and, with the
    `overrides` the plan was made from, the recommendation's run.py command."""
    from rich.console import Console

    width = terminal_width()
    console = Console(width=width)
    console.print(plan_table(plan, width))
    if plan.predictions:
        console.print(assumptions_line(plan), highlight=False)
        for line in host_ram_lines(plan.predictions):
            console.print(line, highlight=False)
        note = tokens_note(plan.predictions)
        if note:
            console.print(note, highlight=False)
    _print_notes(console, plan)
    best = next((p for p in plan.predictions if p.strategy == plan.recommendation), None)
    if best is not None:
        command = run_command(overrides, best)
        console.print(f"run it: {command}", highlight=False, markup=False)


def host_ram_lines(predictions: Sequence[Prediction]) -> list[str]:
    """`zero2_offload needs 3,129.0 GiB of host RAM per node ...` for each offloading row."""
    lines = []
    for p in predictions:
        host = p.assumptions.get("host_mem_bytes_per_node") or 0.0
        if host:
            nodes = p.assumptions.get("num_nodes", 1)
            lines.append(
                f"{p.strategy} needs {host / GIB:,.1f} GiB of host RAM per node (DeepSpeed's "
                f"estimator for the job, over {nodes} node{'s' if nodes != 1 else ''})"
            )
    return lines


def assumptions_line(plan: Plan) -> str:
    """What the rows assume, from the first row: memory and peak per device, the compute
    model, nodes, links, latency, activations, and what total GiB counts."""
    hw = plan.hardware
    a = plan.predictions[0].assumptions
    internode = a.get("internode_gbytes_per_s")
    return (
        f"per device: {hw.get('mem_gib') or 0:.1f} GiB, "
        f"peak {hw.get(f'peak_tflops_{plan.dtype}') or 0:.3g} TFLOP/s {plan.dtype} "
        f"({a.get('precision', plan.dtype)}), "
        + (
            "compute from measured parts; "
            if a.get("time_source") == "measured"
            else f"efficiency {a['efficiency']:.2f}; "
        )
        + f"{a.get('num_nodes', 1)} node(s) × {a.get('ranks_per_node', '?')} ranks, "
        + (  # figures/job_terms.py job_oversubscription
            f"oversubscribed: their threads ask {a['oversubscription']:g}x the "
            f"{a.get('host_cores')} cores, step times assume them time-shared, "
            if (a.get("oversubscription") or 1.0) > 1.0
            else ""
        )
        + f"link {a['bandwidth_gbps']:g} GB/s within a node"
        + (f", {internode:g} GB/s per device between nodes" if internode else "")
        + f", latency {a['latency_s'] * 1e6:g} µs per collective, "
        f"activations {'recomputed' if a['recompute'] else 'stored'} (ckpt: activation "
        "checkpointing); total GiB is the "
        + (
            "process peak, its runtime included"
            if hw.get("device") == "cpu"
            else "CUDA max allocated; need / dev GiB adds the headroom a fit keeps (the CUDA "
            "context and 5 % of the device) and free GiB is what is left"
        )
    )


def _print_notes(console: Console, plan: Plan) -> None:
    """Under the table: where the figures came from, the links, the error bars' store, the
    warnings, the refusals and the recommendation."""
    sources = plan.extra.get("sources") or {}
    if sources:
        console.print(
            "figures from: " + "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in sources.items()),
            highlight=False,
            markup=False,
        )
    if plan.extra.get("links"):
        console.print(plan.extra["links"], highlight=False)
    if plan.history:
        how = "; --calibrated divides them out" if not plan.calibrated else ", divided out"
        console.print(plan.history + (how if plan.error_bars else ""), highlight=False)
    for warning in plan.extra.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    for name, why in plan.refused.items():
        console.print(f"refused {name}: {why}", highlight=False)
    console.print(f"recommendation: {plan.reason}", highlight=False)


def search_json(search: Search) -> dict[str, Any]:
    """`--search --json`: {ranked: [{layout, engine, ...prediction}], refused: {layout: why}}."""
    return {
        "ranked": [
            {
                "layout": label,
                **p.as_dict(),
                "pred_error": {k: b.as_dict() for k, b in search.error_bars.get(label, {}).items()},
            }
            for label, p in search.ranked
        ],
        "refused": search.refused,
        "warnings": search.warnings,
    }


def search_table(search: Search, top: int = 15, width: int | None = None) -> Any:
    """The `top` ranked layouts as a table that fits `width` (default: the terminal's)."""
    rows = []
    for i, (label, p) in enumerate(search.ranked[:top], 1):
        bars = search.error_bars.get(label, {})
        rows.append(
            [
                str(i),
                label,
                tokens_text(p.num_tokens_per_step),
                with_error(f"{p.mem.total / GIB:.2f}", bars.get("mem")),
                memory_cells(p)[1],
                with_error(_fmt(p.step_time_s, "{:.3g}"), bars.get("time")),
                _fmt(p.tokens_per_s, "{:,.0f}"),
                f"{p.comm_bytes_per_step / 1e9:,.3g}",
                _fmt(p.cost_usd_per_1m_tokens, "{:.4g}"),
            ]
        )
    priority = {"#": KEEP, "layout": KEEP, "tok/step": KEEP, "step s": 8, "tokens/s": 8}
    cols = [
        Col(h, [r[i] for r in rows], "left" if h == "layout" else "right", priority.get(h, 3))
        for i, h in enumerate(SEARCH_HEADERS)
    ]
    table, _ = fitted_table(cols, width or terminal_width(), search.title)
    return table


def print_search(
    search: Search, top: int = 15, overrides: Sequence[str] = (), verbose: bool = False
) -> None:
    """The ranking, the refusals counted by kind (`verbose`: each refused layout), the notes
    and the best layout's run.py command (with the `overrides` the search was made from)."""
    from rich.console import Console

    width = terminal_width()
    console = Console(width=width)
    console.print(search_table(search, top, width))
    ranked = [p for _, p in search.ranked]
    note = tokens_note(ranked, ranked=True)
    if note:
        console.print(note, highlight=False)
    console.print(
        f"{len(search.ranked)} layouts fit ({min(top, len(search.ranked))} shown), "
        f"{len(search.refused)} refused" + (":" if search.refused else ""),
        highlight=False,
    )
    for count, why in refusal_counts(search.refused):
        console.print(f"  {count:>4}  {why}", highlight=False, markup=False)
    if verbose:
        for line in refusal_lines(search.refused):
            console.print(line, highlight=False, markup=False)
    elif search.refused:
        console.print("  (--verbose lists each refused layout)", highlight=False)
    if search.history:
        console.print(search.history, highlight=False)
    for warning in search.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    if search.ranked:
        label, best = search.ranked[0]
        command = run_command(overrides, best, label)
        console.print(f"run #1: {command}", highlight=False, markup=False)


def refusal_lines(refused: dict[str, str]) -> list[str]:
    """The refused layouts by reason: those too big with their memory range, the rest grouped
    under the engine's reason, micro batches collapsed."""
    by_reason: dict[str, list[str]] = {}
    too_big: dict[str, list[float]] = {}
    for label, why in refused.items():
        if why.startswith("does not fit: "):
            head = label.rpartition(" mb")[0]
            too_big.setdefault(head, []).append(float(why.split()[3]))
        else:
            by_reason.setdefault(why, []).append(label)
    lines = []
    if too_big:
        memory = (
            f"{head} ({min(v):.0f}-{max(v):.0f} GiB)" if len(v) > 1 else f"{head} ({v[0]:.0f} GiB)"
            for head, v in too_big.items()
        )
        lines.append(f"  does not fit in device memory: {'; '.join(memory)}")
    for why, labels in by_reason.items():
        lines.append(f"  {why}: {'; '.join(_collapse_micro_batches(labels))}")
    return lines


def _collapse_micro_batches(labels: list[str]) -> list[str]:
    """`x mb1`, `x mb2`, ... refused for one reason → `x mb1,2,...` (order kept)."""
    groups: dict[str, list[str]] = {}
    for label in labels:
        head, _, mb = label.partition(" mb")
        groups.setdefault(head, []).append(mb)
    return [f"{head} mb{','.join(mbs)}" for head, mbs in groups.items()]
