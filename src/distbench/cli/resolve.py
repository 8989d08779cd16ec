"""`distbench resolve`: what `python run.py OVERRIDES` would run, resolved and checked, without
launching anything.

    distbench resolve strategy=zero3 world_size=4 [--json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distbench.cli.options import add_overrides, one_line

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from distbench.job import Job


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "resolve",
        help="the Job run.py would run (layout, hardware, DeepSpeed config), checked; run nothing",
    )
    add_overrides(parser)
    parser.add_argument(
        "--json", action="store_true", help="one JSON object: job, deepspeed_config"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The Job as YAML (layout, ZeRO stage, topology, hardware figures and peaks) and, for the
    deepspeed engine, the config its ranks pass to deepspeed.initialize (engines/deepspeed.py
    ds_config) as a second YAML document in JSON. Exit 2 with one line for what run.py
    refuses (spine.precheck: the config, and ranks this machine cannot host); a Job resolved
    for another machine's hardware (a GPU option where this machine has none) is printed with
    a note instead."""
    import json

    from distbench.compose.hardware import is_this_machine
    from distbench.orchestrator import precheck, resolve
    from distbench.prepare import prepare_job

    composed = _compose(args.overrides)
    if composed is None:
        return 2
    cfg, conf_dir = composed
    job, refusal = resolve(cfg, conf_dir)
    shortfall = precheck(cfg, conf_dir) if job is not None else None  # run.py's own check
    if job is None or (shortfall and is_this_machine(job.hardware.device, job.hardware.name)):
        print(f"distbench: resolve: invalid config: {refusal or shortfall}", file=sys.stderr)
        return 2
    job = prepare_job(job, probe=False)  # the cached parts only: nothing measured or written
    ds = _deepspeed_config(job)
    if args.json:
        print(json.dumps({"job": job.tree(), "deepspeed_config": ds}))
        return 0
    _print_header(job, args.overrides)
    if shortfall:  # resolved for another machine's hardware (hardware=h100_sxm on a laptop)
        print(f"# note: run.py on this machine refuses it: {shortfall}")
    print(job.to_yaml(), end="")
    if ds is not None:
        print("--- # the DeepSpeed config the ranks pass to deepspeed.initialize")
        print(json.dumps(ds, indent=2))
    return 0


def _compose(overrides: list[str]) -> tuple[DictConfig, Path] | None:
    """The config run.py would compose and its conf/, or None after one line on stderr."""
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    from distbench.compose.composer import composing

    try:
        with composing() as compose:
            return compose(overrides), compose.conf_dir
    except (HydraException, OmegaConfBaseException, FileNotFoundError) as exc:
        line = one_line(exc)
        if exc.__cause__ is not None:  # e.g. world_size=abc: the value that did not convert
            line += f" ({one_line(exc.__cause__)})"
        if isinstance(exc, MissingConfigException) and exc.options:
            line += f"; choose one of {', '.join(sorted(exc.options))}"
        print(f"distbench: resolve: {line}", file=sys.stderr)
        return None


def _deepspeed_config(job: Job) -> dict[str, Any] | None:
    """The config a deepspeed job's ranks pass to deepspeed.initialize; None for other engines."""
    if job.engine != "deepspeed":
        return None
    from distbench.engines.deepspeed import ds_config

    return ds_config(job)


def _print_header(job: Job, overrides: list[str]) -> None:
    """Three comment lines: the command, the layout, the hardware and its peak."""
    layout, hw = job.layout, job.hardware
    peak = getattr(hw, f"peak_tflops_{job.dtype}", None)
    stage = "" if layout.zero_stage is None else f", ZeRO stage {layout.zero_stage}"
    found = f", hardware=auto found {hw.detected}" if hw.detected else ""
    command = " ".join(["python run.py", *overrides])
    print(f"# distbench resolve: what `{command}` runs; nothing launched")
    print(
        f"# layout: {layout.world_size} ranks = dp {layout.dp} x pp {layout.pp} x tp {layout.tp}"
        f"{stage}, engine {job.engine}; {job.topology.num_nodes} node(s) x "
        f"{job.topology.ranks_per_node} ranks"
    )
    print(
        f"# hardware: {hw.name} ({hw.device}{found}), peak {job.dtype} "
        f"{'unknown' if peak is None else f'{peak:g}'} TFLOP/s per device ({hw.peak_source})"
    )
