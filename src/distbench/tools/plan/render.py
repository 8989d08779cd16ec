"""A plan and a layout search as the terminal shows them (rich tables, the notes under them)
and as `--json` prints them (tools/plan/; the JSON fields are in tools/plan/__init__.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distbench.figures.metrics import GIB
from distbench.figures.pred_error import with_error

if TYPE_CHECKING:
    from rich.console import Console

    from distbench.tools.plan.search import Search
    from distbench.tools.plan.strategies import Plan

PLAN_HEADERS = (
    "strategy",
    "dp×tp×pp z",
    "params",
    "grads",
    "optim",
    "buffers",
    "activ",
    "total GiB",
    "fits",
    "comm GB/step",
    "step s",
    "tokens/s",
    "$/1M tok",
)
SEARCH_HEADERS = ("#", "layout", "total GiB", "step s", "tokens/s", "comm GB/step", "$/1M tok")


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


def plan_table(plan: Plan) -> Any:
    from rich.table import Table

    cal = " cal." if plan.calibrated else ""
    table = Table(title=plan.title + (" (calibrated by the error bars)" if cal else ""))
    for header in PLAN_HEADERS:
        header += cal if header in ("total GiB", "step s") else ""
        table.add_column(
            header,
            justify="left" if header == "strategy" else "right",
            no_wrap=header.startswith(("total", "step")),  # the error bar stays on its line
        )
    for p in plan.predictions:
        mem = p.mem
        fits = {True: "[green]yes[/green]", False: "[red]no[/red]", None: "?"}[p.fits]
        name = f"[bold]{p.strategy} ★[/bold]" if p.strategy == plan.recommendation else p.strategy
        layout = p.layout
        bars = plan.error_bars.get(p.strategy, {})
        table.add_row(
            name,
            f"{layout.dp}×{layout.tp}×{layout.pp} z{layout.zero_stage}",
            *(
                f"{v / GIB:.2f}"
                for v in (mem.params, mem.grads, mem.optimizer, mem.buffers, mem.activations)
            ),
            with_error(f"{mem.total / GIB:.2f}", bars.get("mem")),
            fits,
            f"{p.comm_bytes_per_step / 1e9:.3g}",
            with_error(_fmt(p.step_time_s, "{:.3g}"), bars.get("time")),
            _fmt(p.tokens_per_s, "{:,.0f}"),
            _fmt(p.cost_usd_per_1m_tokens, "{:.4g}"),
        )
    return table


def print_plan(plan: Plan) -> None:
    from rich.console import Console

    wide = 140 + (40 if plan.error_bars else 0)  # room for two error bars on one line
    console = Console(width=max(Console().width, wide))
    console.print(plan_table(plan))
    if plan.predictions:
        console.print(assumptions_line(plan), highlight=False)
        for p in plan.predictions:
            host = p.assumptions.get("host_mem_bytes_per_node") or 0.0
            if host:
                console.print(
                    f"{p.strategy} needs {host / GIB:.1f} GiB of host RAM per node "
                    "(DeepSpeed's estimator)",
                    highlight=False,
                )
    _print_notes(console, plan)


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
        f"link {a['bandwidth_gbps']:g} GB/s within a node"
        + (f", {internode:g} GB/s per device between nodes" if internode else "")
        + f", latency {a['latency_s'] * 1e6:g} µs per collective, "
        f"activations {'recomputed' if a['recompute'] else 'stored'}; total GiB is the "
        + (
            "process peak, its runtime included"
            if hw.get("device") == "cpu"
            else "CUDA max allocated; fits adds the CUDA context and 5 % fragmentation"
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


def print_search(search: Search, top: int = 15) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 140 + (40 if search.error_bars else 0)))
    table = Table(title=search.title)
    for header in SEARCH_HEADERS:
        table.add_column(header, justify="left" if header == "layout" else "right")
    for i, (label, p) in enumerate(search.ranked[:top], 1):
        bars = search.error_bars.get(label, {})
        table.add_row(
            str(i),
            label,
            with_error(f"{p.mem.total / GIB:.2f}", bars.get("mem")),
            with_error(_fmt(p.step_time_s, "{:.3g}"), bars.get("time")),
            _fmt(p.tokens_per_s, "{:,.0f}"),
            f"{p.comm_bytes_per_step / 1e9:.3g}",
            _fmt(p.cost_usd_per_1m_tokens, "{:.4g}"),
        )
    console.print(table)
    console.print(
        f"{len(search.ranked)} layouts fit ({min(top, len(search.ranked))} shown), "
        f"{len(search.refused)} refused:",
        highlight=False,
    )
    for line in refusal_lines(search.refused):
        console.print(line, highlight=False)
    if search.history:
        console.print(search.history, highlight=False)
    for warning in search.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)


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
