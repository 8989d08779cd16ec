"""The regression rule of `distbench compare` as pure functions: pairing by signature, the
direction of each metric, the threshold and the noise (step-time spread, repeated runs).

    pytest tests/unit/test_compare.py
"""

from __future__ import annotations

import pytest

from distbench.tools import compare
from distbench.tools.compare import RunSample

pytestmark = pytest.mark.unit


def run(
    signature="s1",
    label="dp-ws2",
    tokens_per_s=1000.0,
    mem_gib=1.0,
    p50=0.30,
    p90=0.31,
    status="FINISHED",
    machine="cpu",
):
    metrics = {"throughput_tokens_per_s": tokens_per_s, "peak_mem_gib": mem_gib}
    metrics.update(step_time_s_p50=p50, step_time_s_p90=p90)
    return RunSample(f"{signature}-{tokens_per_s}", signature, label, status, metrics, machine)


def verdicts(rows):
    return {(r.config, r.metric): r.verdict for r in rows}


def test_direction_of_each_metric():
    assert compare.goals()["throughput_tokens_per_s"] == "max"
    assert compare.goals()["peak_mem_gib"] == "min"
    assert compare.worse_pct(-10.0, "max") == 10.0  # throughput fell 10 %: worse
    assert compare.worse_pct(-10.0, "min") == -10.0  # memory fell 10 %: better


@pytest.mark.parametrize(
    ("worse", "noise", "expected"),
    [
        (6.0, 1.0, "regression"),
        (6.0, 8.0, "within noise"),
        (4.0, 0.0, "ok"),
        (5.0, 0.0, "ok"),  # strictly more than the threshold
        (-6.0, 1.0, "improved"),
        (-6.0, 8.0, "ok"),
    ],
)
def test_judge_needs_both_the_threshold_and_the_noise(worse, noise, expected):
    assert compare.judge(worse, noise, threshold_pct=5.0) == expected


def test_noise_is_the_step_time_spread_or_twice_the_repeat_std():
    assert compare.step_spread_pct(
        {"step_time_s_p50": 0.5, "step_time_s_p90": 0.6}
    ) == pytest.approx(20.0)
    assert compare.step_spread_pct({"step_time_s_p50": 0.5}) is None
    assert compare.repeat_noise_pct([100.0]) == 0.0
    assert compare.repeat_noise_pct([90.0, 110.0]) == pytest.approx(2 * 14.142 / 100 * 100, 1e-3)
    base, cand = [run(p50=0.3, p90=0.33)], [run(p50=0.3, p90=0.36)]
    assert compare.noise_pct("throughput_tokens_per_s", base, cand) == pytest.approx(20.0)
    assert compare.noise_pct("peak_mem_gib", base, cand) == 0.0  # memory: no step-time spread


def test_a_throughput_drop_beyond_threshold_and_noise_is_a_regression():
    # one run a side: judged only with the single-run bound lifted (tests/unit/test_noise_*.py)
    rows = compare.compare_sweeps([run()], [run(tokens_per_s=800.0)], single_run_noise_pct=0)
    row = next(r for r in rows if r.metric == "throughput_tokens_per_s")
    assert row.verdict == "regression" and row.regression
    assert row.change_pct == pytest.approx(-20.0)
    assert row.noise_pct == pytest.approx(100 * 0.01 / 0.30)
    assert compare.regressed_configs(rows) == ["dp-ws2"]


def test_memory_rise_is_a_regression_and_memory_drop_an_improvement():
    rows = compare.compare_sweeps(
        [run("a", "dp-ws2"), run("b", "zero3-ws2")],
        [run("a", "dp-ws2", mem_gib=1.2), run("b", "zero3-ws2", mem_gib=0.8)],
    )
    assert verdicts(rows)[("dp-ws2", "peak_mem_gib")] == "regression"
    assert verdicts(rows)[("zero3-ws2", "peak_mem_gib")] == "improved"
    assert verdicts(rows)[("dp-ws2", "throughput_tokens_per_s")] == "ok"


def test_a_drop_inside_the_step_time_spread_is_not_flagged():
    noisy = run(p50=0.30, p90=0.36)  # steps vary 20 % above their median
    rows = compare.compare_sweeps([noisy], [run(tokens_per_s=880.0, p50=0.34, p90=0.36)])
    assert verdicts(rows)[("dp-ws2", "throughput_tokens_per_s")] == "within noise"
    assert not compare.regressed_configs(rows)


def test_repeated_runs_are_samples_their_spread_is_noise():
    base = [run(tokens_per_s=v) for v in (1000.0, 800.0, 1200.0)]
    cand = [run(tokens_per_s=v) for v in (900.0, 700.0, 1100.0)]
    row = compare.compare_sweeps(base, cand)[0]
    assert row.metric == "throughput_tokens_per_s"  # rows follow the order of the metrics
    assert (row.baseline, row.baseline_n, row.candidate, row.candidate_n) == (1000.0, 3, 900.0, 3)
    assert row.noise_pct == pytest.approx(2 * 100 * 200 / 900)  # the candidate's spread
    assert row.verdict == "within noise"


def test_failed_in_candidate_is_a_regression_unpaired_configs_are_not_judged():
    rows = compare.compare_sweeps(
        [run("a", "dp-ws2"), run("b", "tp-ws2"), run("c", "pp-ws2", status="FAILED")],
        [run("a", "dp-ws2", status="FAILED"), run("d", "zero1-ws2"), run("c", "pp-ws2")],
    )
    found = verdicts(rows)
    assert found[("dp-ws2", "throughput_tokens_per_s")] == "failed in candidate"
    assert found[("tp-ws2", "peak_mem_gib")] == "only in baseline"
    assert found[("zero1-ws2", "peak_mem_gib")] == "only in candidate"
    assert found[("pp-ws2", "peak_mem_gib")] == "failed in baseline"
    assert compare.regressed_configs(rows) == ["dp-ws2"]
    assert compare.compared_configs(rows) == ["dp-ws2", "pp-ws2"]


def test_configs_are_paired_by_signature_and_named_apart_when_names_collide():
    base = [run("aaaaaaaa11", "dp-ws2"), run("bbbbbbbb22", "dp-ws2", tokens_per_s=2000.0)]
    cand = [run("aaaaaaaa11", "dp-ws2"), run("bbbbbbbb22", "dp-ws2", tokens_per_s=1500.0)]
    rows = compare.compare_sweeps(base, cand, single_run_noise_pct=0)
    found = verdicts(rows)
    assert found[("dp-ws2 #aaaaaaaa", "throughput_tokens_per_s")] == "ok"
    assert found[("dp-ws2 #bbbbbbbb", "throughput_tokens_per_s")] == "regression"


def test_runs_on_another_machine_are_noted():
    rows = compare.compare_sweeps([run(machine="cpu A")], [run(machine="cpu B")])
    assert {r.note for r in rows} == {"other machine"}
    assert {r.note for r in compare.compare_sweeps([run()], [run()])} == {""}


def test_missing_metric_is_no_data_not_a_regression():
    gemm = RunSample("r", "s", "gemm-ws2", "FINISHED", {"gemm_time_s_p50": 0.1})
    rows = compare.compare_sweeps([gemm], [gemm])
    assert {r.verdict for r in rows} == {"no data"}
    assert compare.compared_configs(rows) == ["gemm-ws2"]


def test_the_workloads_declare_every_metric_compare_judges():
    """The catalogue (WorkloadSpec.metrics) holds each metric compare knew by hand, same goal;
    those computed from the step time carry its spread as noise."""
    lower = "step_time_s_mean step_time_s_p50 step_time_s_p90 peak_mem_gib init_mem_gib"
    lower += " cost_usd_per_1m_tokens time_to_first_token_s time_per_output_token_s"
    lower += " latency_s_p50 latency_s_p90"
    higher = "throughput_tokens_per_s tflops_total tflops_per_device mfu_pct decode_tokens_per_s"
    goals = compare.goals()
    assert {m: goals.get(m) for m in lower.split()} == dict.fromkeys(lower.split(), "min")
    assert {m: goals.get(m) for m in higher.split()} == dict.fromkeys(higher.split(), "max")
    step_time = {m for m in goals if compare.from_step_time(m)}
    assert step_time == {
        "step_time_s_mean",
        "step_time_s_p50",
        "step_time_s_p90",
        "throughput_tokens_per_s",
        "tflops_total",
        "tflops_per_device",
        "mfu_pct",
        "cost_usd_per_1m_tokens",
    }


def test_metrics_and_threshold_are_checked():
    assert compare.parse_metrics(None) == ["throughput_tokens_per_s", "peak_mem_gib"]
    assert compare.parse_metrics("step_time_s_p50, mfu_pct") == ["step_time_s_p50", "mfu_pct"]
    with pytest.raises(ValueError, match="unknown metric 'tokens'; use some of "):
        compare.parse_metrics("tokens")
    with pytest.raises(ValueError, match="must be a percentage >= 0"):
        compare.check_threshold(-1.0)
    with pytest.raises(ValueError, match="must be a percentage"):
        compare.check_threshold(float("nan"))


def test_the_table_and_summary_say_what_was_flagged():
    rows = compare.compare_sweeps(
        [run()], [run(tokens_per_s=800.0)], threshold_pct=5.0, single_run_noise_pct=0
    )
    frame = compare.to_frame(rows)
    assert list(frame["metric"]) == ["throughput_tokens_per_s", "peak_mem_gib"]
    assert list(frame["verdict"]) == ["regression", "ok"]
    assert set(frame.columns) >= {"config", "baseline", "candidate", "change_pct", "noise_pct"}
    line = compare.summary_line(rows, 5.0)
    assert line.startswith("distbench: compare: REGRESSION in 1 of 1 configuration(s): dp-ws2")
    assert "no regression in 1" in compare.summary_line(compare.compare_sweeps([run()], [run()]), 5)
