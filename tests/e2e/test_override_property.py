"""Property: any override a user may type either runs (an outcome is recorded, FINISHED or
FAILED with its kind) or is refused in one line before anything starts — never a traceback —
in a single run and inside a sweep (hypothesis draws the overrides; real run.py processes).

    pytest tests/e2e/test_override_property.py
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.test_sweep import run_py

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BASE = ["tracking=none", "model=tiny", "workload.num_warmup_steps=0", "workload.num_steps=1"]
KEYS = st.sampled_from(
    [
        "world_size",
        "strategy.tp",
        "strategy.dp",
        "batch.micro_batch_size",
        "batch.seq_len",
        "workload.lr",
        "workload.dtype",
        "zero_stage",
        "limits.timeout_s",
        "limits.max_mem_gib",
        "fault.rank",
        "num_nodes",
        "rank_launcher",
        "+zero_optimization.reduce_bucket_size",
    ]
)
VALUES = st.one_of(
    st.integers(-2, 9),
    st.sampled_from(["nan", "inf", "-1.5", "abc", "bf16", "fp16", "null", "''", "1e-3", "1024"]),
)
OVERRIDES = st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=2, unique_by=lambda kv: kv[0])


def assert_one_line_or_ran(proc) -> None:
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output[-3000:]
    if proc.returncode == 2:  # refused before launch: distbench's line, or Hydra's type error
        refusal = [line for line in proc.stderr.splitlines() if line.startswith("distbench:")]
        hydra_error = "Error merging override" in proc.stderr or "Could not" in proc.stderr
        assert hydra_error or (len(refusal) == 1 and "invalid config" in refusal[0]), output
    else:
        assert proc.returncode in (0, 1), output[-3000:]  # ran: FINISHED (0) or FAILED (1)


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(overrides=OVERRIDES)
def test_a_single_run_runs_or_refuses_in_one_line(tmp_path, overrides):
    proc = run_py([*BASE, *(f"{k}={v}" for k, v in overrides)], tmp_path, timeout_s=600)
    assert_one_line_or_ran(proc)


@settings(
    max_examples=1, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(overrides=OVERRIDES)
def test_inside_a_sweep_every_job_gets_an_outcome(tmp_path_factory, overrides):
    tmp_path = tmp_path_factory.mktemp("sweep")
    sweep_dir = tmp_path / "s"
    args = ["-m", "strategy=dp,ddp", *BASE, *(f"{k}={v}" for k, v in overrides)]
    proc = run_py([*args, f"hydra.sweep.dir={sweep_dir}"], tmp_path, timeout_s=900)
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output[-3000:]
    if proc.returncode == 2:  # Hydra refused the override itself (a type it cannot merge)
        return
    assert proc.returncode == 0, output[-3000:]
    outcomes = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/outcome.json"))]
    assert len(outcomes) == 2
    for o in outcomes:
        assert o["status"] in ("FINISHED", "FAILED")
        if o["status"] == "FAILED":
            assert o["failure_kind"] and "\n" not in o["failure_reason"]
