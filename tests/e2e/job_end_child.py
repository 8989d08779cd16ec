"""An orchestrator's job end, driven in a child process for tests/e2e/test_job_end_edges.py: the
sweep's parent run opened by the real SweepCallback, the job's live run started as the launch
step starts it, then the record step under a fault, the child dying as an orchestrator dies.
No rank is started: the job's measurement, where one is needed, is a real one read from a shared
sweep's job dir.

    python -m tests.e2e.job_end_child SCENARIO ARGS.json     # from the repository root

SCENARIO: `finish` (record a FINISHED job, then wait to be SIGKILLed), `unwritable` (the job
dir vanishes before the record; the sweep then ends), `full_disk` (no file can grow: run_job
with a job log, as Hydra's), `killed` (two sweeps each with a live job, then SIGKILL itself).
"""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

PROJECT_DIR = Path(__file__).resolve().parents[2]
CONF_DIR = PROJECT_DIR / "conf"


def sweep_config(sweep_dir: str, uri: str, overrides: list[str]) -> DictConfig:
    """What SweepCallback reads of the config Hydra hands it."""
    return OmegaConf.create(
        {
            "hydra": {"sweep": {"dir": sweep_dir}, "overrides": {"task": overrides}, "sweeper": {}},
            "tracking": {
                "backend": "sqlite",
                "uri": uri,
                "experiment_name": "distbench",
                "ui_port": 5000,
            },
        }
    )


def open_sweep(sweep_dir: str, uri: str, overrides: list[str]) -> Any:
    from distbench.tracking.sweep import SweepCallback

    callback = SweepCallback()
    callback.on_multirun_start(sweep_config(sweep_dir, uri, overrides))
    return callback


def start_job(config_yaml: str, job_dir: Path, label: str, live: bool = True) -> tuple:
    """The job resolved from its composed config, its outcome, its dir (with Hydra's
    .hydra/config.yaml) owned by this process and (with `live`) its RUNNING child run, as
    Hydra, spine and launch leave them."""
    from distbench.orchestrator import JobContext, new_outcome, resolve_or_refuse
    from distbench.orchestrator.recording import start_live
    from distbench.orphans import mark_owner
    from distbench.tracking.sweep import resolve_tracking_uri

    job = resolve_or_refuse(OmegaConf.load(config_yaml), CONF_DIR)
    ctx = JobContext(job_dir, PROJECT_DIR, label, time.monotonic())
    outcome = new_outcome(job, ctx)
    (job_dir / ".hydra").mkdir(exist_ok=True)  # what Hydra saves in every job dir
    shutil.copy(config_yaml, job_dir / ".hydra" / "config.yaml")
    mark_owner(job_dir)
    if live:
        uri = resolve_tracking_uri(job.tracking, Path.cwd())
        start_live(job, uri, outcome, ctx).stop(cancelled=False)
    return job, outcome, ctx


def finish(args: dict[str, Any]) -> None:
    from distbench.launch.workers import LaunchOutcome
    from distbench.orchestrator.measuring import measure_job
    from distbench.orchestrator.recording import record

    open_sweep(args["sweep_dir"], args["uri"], ["strategy=dp,zero1"])
    job, outcome, ctx = start_job(args["config"], Path(args["sweep_dir"]) / "0", "job 1/2")
    measured = measure_job(job, LaunchOutcome(ok=True, returncode=0, wall_time_s=1.0), outcome, ctx)
    record(job, outcome, measured, ctx)
    print("recorded", flush=True)
    time.sleep(600)  # the sweep would go on to job 2: the test kills it first


def unwritable(args: dict[str, Any]) -> None:
    from distbench.orchestrator import new_outcome
    from distbench.orchestrator.recording import record
    from distbench.workloads import Measured

    sweep_dir = args["sweep_dir"]
    callback = open_sweep(sweep_dir, args["uri"], ["world_size=2"])
    job_dir = Path(sweep_dir) / "0"
    job, _, ctx = start_job(args["config"], job_dir, "job 1/1")
    job_dir.rename(f"{job_dir}.away")  # its mount gone: every path under it fails
    job_dir.write_text("not a directory")
    outcome = new_outcome(job, ctx)  # as spine records what raised inside the job
    outcome.fail("orchestrator_error", "NotADirectoryError: the job dir is gone")
    record(job, outcome, Measured(metrics={}), ctx)
    callback.on_multirun_end(sweep_config(sweep_dir, args["uri"], []))  # its table, its parent


def full_disk(args: dict[str, Any]) -> None:
    from distbench.launch.progress import own_lines_to_log
    from distbench.orchestrator import run_job
    from distbench.tools.summary import load_outcomes

    sweep_dir = Path(args["sweep_dir"])
    job_dir = sweep_dir / "0"
    job_dir.mkdir(parents=True)
    log = logging.FileHandler(job_dir / "run.log")  # Hydra's job log, open before the disk fills
    logging.getLogger().addHandler(log)
    logging.getLogger().setLevel(logging.INFO)
    cfg = OmegaConf.load(args["config"])
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))  # no file may grow: EFBIG
    with own_lines_to_log():
        run_job(cfg, job_dir, CONF_DIR, PROJECT_DIR)
    from distbench.tracking.job_outcomes import with_unwritten  # what the sweep's end reads

    print(json.dumps(with_unwritten(load_outcomes(sweep_dir), sweep_dir)), flush=True)


def killed(args: dict[str, Any]) -> None:
    for sweep_dir, config in zip(args["sweep_dirs"], args["configs"], strict=True):
        open_sweep(sweep_dir, args["uri"], ["strategy=dp,zero1"])
        start_job(config, Path(sweep_dir) / "0", "job 1/2")
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    scenario, args_file = sys.argv[1:]
    os.environ.setdefault("DISTBENCH_HOME", str(PROJECT_DIR))
    from distbench.compose.schema import register_configs

    register_configs()
    {"finish": finish, "unwritable": unwritable, "full_disk": full_disk, "killed": killed}[
        scenario
    ](json.loads(Path(args_file).read_text()))
