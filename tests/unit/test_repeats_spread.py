"""repeats=N (orchestrator/repeats.py): the key is checked, kept out of the signature, each
repeat named, placed and tagged, and the last one's spread computed by hand.

    pytest tests/unit/test_repeats_spread.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from distbench.compose.schema import ConfigError
from distbench.job import resolve_job
from distbench.orchestrator import repeats as rp
from distbench.orchestrator.naming import repeat_label, repeat_run_name
from distbench.orchestrator.refused import refused_job
from distbench.tracking.signature import run_signature
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit


def test_repeats_must_be_a_positive_integer():
    assert rp.check_repeats(3) == 3
    for bad in (0, -1, True, 2.5, "3"):
        with pytest.raises(ConfigError, match=r"repeats=.* must be an integer >= 1"):
            rp.check_repeats(bad)
    assert rp.repeats_of(compose_config(["repeats=3"])) == (3, None)
    assert rp.repeats_of(compose_config([])) == (1, None)
    count, why = rp.repeats_of(compose_config(["repeats=0"]))
    assert count == 1 and why.startswith("repeats=0 must be an integer >= 1")


def test_repeats_is_not_part_of_the_signature():
    once, thrice = (compose_config(["model=tiny", f"repeats={n}"]) for n in (1, 3))
    assert run_signature(resolve_job(once, CONF_DIR).tree()) == run_signature(
        resolve_job(thrice, CONF_DIR).tree()
    )
    refused = [refused_job(cfg, "why").tree() for cfg in (once, thrice)]
    assert run_signature(refused[0]) == run_signature(refused[1])


def test_each_repeat_is_named_placed_and_labelled():
    assert repeat_run_name("dp-ws2", 2) == "dp-ws2 repeat=2"
    assert repeat_run_name("dp-ws2 micro_batch_size=4", 2) == "dp-ws2 micro_batch_size=4,repeat=2"
    assert repeat_label("job 1/2", 2, 3) == "job 1/2 repeat 2/3"
    assert repeat_label("job 1/2", 1, 1) == "job 1/2"
    job_dir = Path("multirun/x/0")
    assert rp.repeat_dir(job_dir, 1, 3) == job_dir / "repeat-1"
    assert rp.repeat_dir(job_dir, 3, 3) == job_dir  # the last: the job's own dir


def test_the_spread_across_repeats_by_hand():
    assert rp.spread_pct([0.30, 0.33, 0.36]) == pytest.approx(100 * 0.06 / 0.33)
    assert rp.spread_pct([0.30]) is None and rp.spread_pct([0.0, 0.0]) is None
    per_repeat = [{"step_time_s_p50": 0.30, "mfu_pct": 1.0}, {"step_time_s_p50": 0.36}]
    spread = rp.spread_metrics(per_repeat, ["step_time_s_p50", "mfu_pct"])
    assert spread == {
        "num_repeats_finished": 2.0,
        "step_time_s_p50_repeat_spread_pct": pytest.approx(100 * 0.06 / 0.33),
    }  # mfu_pct: one repeat measured it, no spread
    line = rp.spread_line("job 1/1 repeat 2/2", per_repeat, "step_time_s_p50")
    assert line == (
        "distbench: job 1/1 repeat 2/2: 2 repeats finished, step_time_s_p50 0.3–0.36 "
        "(spread 18.2 %)"
    )
    assert rp.spread_line("job", per_repeat, "mfu_pct") is None
