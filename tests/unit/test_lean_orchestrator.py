"""The orchestrator validates, launches and derives metrics without importing the heavy stack:
torch, deepspeed and transformers load only in the ranks (and in subprocesses)."""

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
from distbench.compose.schema import validate
from distbench.launch.workers import worker_command, worker_env
from distbench.compose.hardware import resolve_hardware
from distbench import orchestrator
from distbench.tracking import sweep
from distbench.tools import summary
from distbench.launch import progress
from distbench.tracking import spool
from distbench.launch import watchdog
from distbench.workloads import load
cfg = compose_config(["strategy=zero3", "world_size=4"])
layout = validate(cfg)
worker_command("/tmp/x", 4, 29500); worker_env("cpu", 4, 2)
resolve_hardware({"name": "auto", "device": "auto"}, CONF_DIR)
for name in ("train", "gemm", "collectives"):
    load(name)
heavy = [m for m in ("torch", "deepspeed", "transformers") if m in sys.modules]
print(json.dumps(heavy))
"""


def test_validation_and_launch_do_not_import_torch_deepspeed_or_transformers():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []
