"""The `distbench` console script: tools around the runs that run.py makes.

distbench ui [--port 5000] [--workers 1]   # the MLflow UI on the configured store, on 127.0.0.1
distbench sync multirun/DAY/TIME   # upload a sweep's spooled runs that did not land
distbench summary [multirun/DAY/TIME | latest | RUN_ID | RUN_NAME]   # reprint a sweep's table
distbench plan model=llama3_8b world_size=8 hardware=h100_sxm [--json]   # predict, run nothing
distbench resolve strategy=zero3 world_size=4 [--json]   # the Job and DeepSpeed config
distbench report --sweep latest --out report/   # tables + plots from MLflow, logged on the sweep
distbench server --backend postgresql://mlflow@db:5432/mlflow   # a team server (PGPASSWORD)
distbench compare --baseline <parent run id> --candidate latest  # exit 1 on a regression
distbench compare --baseline previous   # the newest sweep against the one started before it
distbench schedule experiment=strategy_grid --cron "@daily" [--baseline previous] [--dry-run]

Each command is a module here whose `register(subparsers)` adds its parser and sets its handler
(`func`, returning the exit code); the options several share are in cli/options.py. The CLI
starts fast: a command imports what it needs (pandas, mlflow, Hydra) when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys

from distbench.cli import (
    compare,
    plan,
    report,
    resolve,
    schedule,
    server,
    summary,
    sync,
    ui,
)

# in the order `distbench --help` lists them
COMMANDS = (ui, sync, summary, plan, resolve, report, server, compare, schedule)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="distbench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `distbench resolve ... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
