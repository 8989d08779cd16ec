"""`distbench plan` as users call it: a real subprocess, JSON and table output.

pytest tests/e2e/test_plan_cli.py -m e2e
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_DIR, config_options
from tests.unit.test_plan import KEYS as UNIT_KEYS

pytestmark = pytest.mark.e2e

KEYS = UNIT_KEYS - {"recommended"}


def _plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "distbench.cli", "plan", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PROJECT_DIR,
    )


def test_plan_json_for_llama3_8b_on_8_h100():
    done = _plan("model=llama3_8b", "world_size=8", "hardware=h100_sxm", "--json")
    assert done.returncode == 0, done.stderr
    *predictions, final = json.loads(done.stdout)
    assert sorted(p["strategy"] for p in predictions) == sorted(
        set(config_options("strategy")) - {"single"}
    )
    assert set(final["refused"]) == {"single"}
    for p in predictions:
        assert set(p) >= KEYS
        assert {"params", "grads", "optimizer", "activations", "total"} <= set(p["mem_bytes"])
        assert p["world_size"] == 8 and p["num_params"] == 8_030_261_248
        assert p["step_time_s"] > 0 and p["tokens_per_s"] > 0
    assert final["recommendation"] in {p["strategy"] for p in predictions}
    assert final["reason"].startswith(final["recommendation"] + ": fits")


def test_plan_table_for_llama3_70b_on_64_h100_completes_in_seconds():
    # bounded by _plan's subprocess timeout, not a wall-clock assertion (a loaded CI host)
    done = _plan("model=llama3_70b", "world_size=64", "hardware=h100_sxm", "workload.dtype=bf16")
    assert done.returncode == 0, done.stderr
    assert "zero3_offload" in done.stdout and "recommendation:" in done.stdout


def test_plan_refuses_an_unknown_option_in_one_line():
    done = _plan("model=no_such_model")
    assert done.returncode == 2
    assert done.stderr.startswith("distbench: plan:") and len(done.stderr.splitlines()) == 1
