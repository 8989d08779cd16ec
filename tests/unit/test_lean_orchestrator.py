"""The orchestrator resolves jobs (every workload, both engines), plans their launch and derives
metrics without importing the heavy stack: torch, deepspeed and transformers load only in the
ranks (and in subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_DIR

pytestmark = pytest.mark.unit

SCRIPT = """
import json, sys
sys.argv = ["run.py"]
from tests.conftest import compose_config, CONF_DIR
from distbench.job import Job, rank_module, resolve_job
from distbench.launch.workers import worker_command, worker_env
from distbench.launch.topology import plan_launch
from distbench.compose.hardware import resolve_hardware
from distbench import engines, orchestrator, workloads
from distbench.tracking import sweep
from distbench.tools import summary
from distbench.launch import progress
from distbench.tracking import spool
from distbench.launch import watchdog
job = resolve_job(compose_config(["strategy=zero3", "world_size=4"]), CONF_DIR)
assert Job.from_tree(job.tree()) == job
resolve_job(compose_config(["strategy=fsdp", "world_size=2"]), CONF_DIR)  # the torch engine
for name in sorted(workloads.registry()):
    # its workload module: combine and measure run in the orchestrator
    rank_module(resolve_job(compose_config([f"workload={name}"]), CONF_DIR))
for name in engines.registry():
    engines.get(name)
plan_launch(job, "/tmp/x", env={})
orchestrator.describe(job)
worker_command("/tmp/x", 4, 29500); worker_env("cpu", 4, 2)
resolve_hardware({"name": "auto", "device": "auto"}, CONF_DIR)
heavy = [m for m in ("torch", "deepspeed", "transformers") if m in sys.modules]
print(json.dumps(heavy))
"""


def test_resolving_and_launching_do_not_import_torch_deepspeed_or_transformers():
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
