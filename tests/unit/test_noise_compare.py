"""`distbench compare` with one run a side (tools/compare.py): a timing change within the
worst-case single-run noise is `cannot judge` (exit 0, with how to get samples), any is when a
run was oversubscribed, memory is judged as before, repeats are samples.

    pytest tests/unit/test_noise_compare.py
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from distbench.tools import compare
from distbench.tools.compare import RunSample
from distbench.tools.compare_log import comparison_counts

pytestmark = pytest.mark.unit


def run(tokens_per_s=1000.0, mem_gib=1.0, oversubscribed=False, run_id="r") -> RunSample:
    metrics = {"throughput_tokens_per_s": tokens_per_s, "peak_mem_gib": mem_gib}
    metrics.update(step_time_s_p50=0.30, step_time_s_p90=0.31)  # a quiet run: 3 % spread
    return RunSample(run_id, "s1", "zero3-ws2", "FINISHED", metrics, "cpu", oversubscribed)


def verdict(rows, metric="throughput_tokens_per_s"):
    return next(r for r in rows if r.metric == metric)


def test_one_run_a_side_cannot_judge_a_timing_change_within_the_worst_case_noise():
    # the review's case: the same config rerun on a busy host, 20 % slower
    rows = compare.compare_sweeps([run()], [run(tokens_per_s=800.0)])
    row = verdict(rows)
    assert row.verdict == "cannot judge" and not row.regression
    assert "rerun both with repeats=3" in row.note
    assert compare.regressed_configs(rows) == []  # exit 0
    line = compare.summary_line(rows, 5.0)
    assert "no regression" in line and "cannot judge 1 from one run a side (zero3-ws2)" in line
    assert comparison_counts(rows)["num_configs_unjudged"] == 1  # a metric of the logged run


def test_a_change_beyond_the_worst_case_noise_is_judged_from_one_run():
    worse = 100 - compare.SINGLE_RUN_NOISE_PCT - 10  # 50 % of the throughput left
    row = verdict(compare.compare_sweeps([run()], [run(tokens_per_s=10.0 * worse)]))
    assert row.verdict == "regression"
    better = verdict(compare.compare_sweeps([run()], [run(tokens_per_s=2000.0)]))
    assert better.verdict == "improved"
    lifted = compare.compare_sweeps([run()], [run(tokens_per_s=800.0)], single_run_noise_pct=10)
    assert verdict(lifted).verdict == "regression"  # --single-run-noise-pct 10


def test_an_oversubscribed_run_is_never_judged_from_one_run():
    rows = compare.compare_sweeps([run()], [run(tokens_per_s=100.0, oversubscribed=True)])
    row = verdict(rows)
    assert row.verdict == "cannot judge" and "an oversubscribed run" in row.note


def test_memory_is_judged_from_one_run_and_repeats_are_samples():
    rows = compare.compare_sweeps([run()], [run(tokens_per_s=800.0, mem_gib=1.2)])
    assert verdict(rows, "peak_mem_gib").verdict == "regression"  # a busy host moves no memory
    base = [run(run_id=f"b{i}") for i in range(3)]
    cand = [run(tokens_per_s=800.0, run_id=f"c{i}") for i in range(3)]
    assert verdict(compare.compare_sweeps(base, cand)).verdict == "regression"  # 3 repeats


def test_the_oversubscribed_tag_is_read_from_the_runs():
    def mlflow_run(tags):
        return SimpleNamespace(
            info=SimpleNamespace(run_id="a" * 32, run_name="dp-ws2", status="FINISHED"),
            data=SimpleNamespace(tags={"distbench.signature": "s", **tags}, metrics={}),
        )

    loaded, quiet = compare.samples_of([mlflow_run({"oversubscribed": "true"}), mlflow_run({})])
    assert loaded.oversubscribed and not quiet.oversubscribed
