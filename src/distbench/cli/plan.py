"""`distbench plan`: every strategy's predicted memory, communication, step time and cost, or
with --search every layout ranked (tools/plan/), with the run.py command of the best; nothing
runs. The search shows its progress on stderr and counts refused layouts by reason
(--verbose lists them).

    distbench plan model=llama3_8b world_size=8 hardware=h100_sxm [--json]
    distbench plan --search model=llama3_70b world_size=64 hardware=h100_sxm batch=large
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable, Iterator

from distbench.cli.options import add_overrides


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "plan",
        help="predict memory, communication, step time and cost of every strategy; run nothing",
    )
    add_overrides(parser)
    parser.add_argument("--strategies", help="comma-separated, default: every conf/strategy option")
    parser.add_argument("--json", action="store_true", help="print one JSON list instead")
    parser.add_argument(
        "--efficiency",
        type=float,
        help="assumed MFU (default: the hardware's train_efficiency, else GPU 0.4, CPU 0.6); "
        "sets hardware.time_source=efficiency",
    )
    parser.add_argument("--bandwidth-gbps", type=float, help="GB/s, default hardware's")
    parser.add_argument("--latency-us", type=float, help="µs per collective (default 10 / 100)")
    parser.add_argument("--recompute", action="store_true", help="full activation recomputation")
    parser.add_argument(
        "--calibrated",
        action="store_true",
        help="divide each prediction by (1 + the median error of the store's earlier runs)",
    )
    parser.add_argument(
        "--measured-links",
        action="store_true",
        help="links from the α-β fits of the store's collectives runs (per tier), if any",
    )
    parser.add_argument(
        "--search",
        action="store_true",
        help="every (engine, dp, tp, pp, ZeRO stage, micro batch) ranked, refusals counted by "
        "reason",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="with --search: list each refused layout"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Exit 2 with one line for a figure out of range or a config Hydra cannot compose."""
    from hydra.errors import HydraException

    refusal = _bad_figure(args)
    if refusal:
        print(f"distbench: plan: {refusal}", file=sys.stderr)
        return 2
    try:
        if args.search:
            _search(args)
        else:
            _plan(args)
    except (HydraException, FileNotFoundError) as exc:
        print(f"distbench: plan: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    return 0


def _bad_figure(args: argparse.Namespace) -> str | None:
    """The first of --efficiency, --bandwidth-gbps, --latency-us out of its range, as a line."""
    checks = (
        ("--efficiency", args.efficiency, lambda v: 0 < v <= 1, "a fraction in (0, 1]"),
        ("--bandwidth-gbps", args.bandwidth_gbps, lambda v: v > 0, "a positive number"),
        ("--latency-us", args.latency_us, lambda v: v >= 0, "a number >= 0"),
    )
    for option, value, ok, allowed in checks:
        if value is not None and (not math.isfinite(value) or not ok(value)):
            return f"{option} {value}: must be {allowed}"
    return None


def _search(args: argparse.Namespace) -> None:
    import json

    from distbench.tools.plan import print_search, search_json, search_layouts

    with search_progress() as on_layout:
        found = search_layouts(
            args.overrides,
            efficiency=args.efficiency,
            recompute=args.recompute,
            on_layout=on_layout,
        )
    if args.json:
        print(json.dumps(search_json(found)))
    else:
        print_search(found, overrides=args.overrides, verbose=args.verbose)


@contextlib.contextmanager
def search_progress() -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr (stdout stays the table or the JSON) that the search
    advances as it tries each layout; transient: it leaves no line behind."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("searching layouts"), BarColumn(), MofNCompleteColumn())
    with Progress(
        *columns, TimeElapsedColumn(), console=Console(stderr=True), transient=True
    ) as bar:
        task = bar.add_task("search", total=None)

        def advance(tried: int, total: int) -> None:
            bar.update(task, completed=tried, total=total)

        yield advance


def _plan(args: argparse.Namespace) -> None:
    import json

    from distbench.tools.plan import make_plan, plan_json, print_plan

    plan = make_plan(
        args.overrides,
        [s for s in (args.strategies or "").split(",") if s] or None,
        efficiency=args.efficiency,
        bandwidth_gbps=args.bandwidth_gbps,
        latency_s=None if args.latency_us is None else args.latency_us * 1e-6,
        recompute=args.recompute,
        history=True,
        calibrated=args.calibrated,
        measured_links=args.measured_links,
    )
    if args.json:
        print(json.dumps(plan_json(plan)))
    else:
        print_plan(plan, overrides=args.overrides)
