"""How well a sweep's runs were predicted together (figures/sweep_accuracy.py): counts within the
target, the common factor a machine's speed puts on every run, the count after it, Spearman's
order; the lines under the sweep's table and the parent's metrics."""

from __future__ import annotations

import pytest

from distbench.figures.sweep_accuracy import (
    accuracy_lines,
    accuracy_metrics,
    ranks,
    spearman,
    sweep_accuracy,
)
from distbench.tools.summary import print_summary
from distbench.tracking.parent import sweep_summary

pytestmark = pytest.mark.unit


def run(pred_s: float, measured_s: float, pred_gib: float = 1.0, gib: float = 1.0) -> dict:
    return {
        "pred_step_time_s": pred_s,
        "step_time_s_p50": measured_s,
        "pred_peak_mem_gib": pred_gib,
        "peak_mem_gib": gib,
    }


def test_a_machine_slower_alike_for_every_run_is_told_apart_from_the_models_error():
    # every run 1.5x slower than predicted, except the last, 2.2x: only it misses after the factor
    pairs = [(1.0, 1.5), (2.0, 3.0), (3.0, 4.5), (4.0, 6.0), (1.5, 3.3)]
    a = sweep_accuracy(pairs, 30.0)
    assert a.num_runs == 5 and a.num_within_target == 0
    assert a.common_factor == pytest.approx(1.5)
    assert a.num_within_target_after_common == 4
    assert a.rank_corr == pytest.approx(0.9)  # the slow one ranks 3rd measured, 2nd predicted


def test_spearman_is_one_for_the_same_order_minus_one_reversed_and_none_without_an_order():
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert spearman([1, 2], [1, 2]) is None  # two runs: no order worth a figure
    assert spearman([1, 1, 1], [1, 2, 3]) is None  # the prediction did not order them
    assert ranks([5.0, 1.0, 5.0, 3.0]) == [3.5, 1.0, 3.5, 2.0]  # ties share their mean rank


def test_no_pair_is_no_accuracy_and_a_run_without_a_prediction_is_left_out():
    assert sweep_accuracy([], 30.0) is None
    runs = [run(1.0, 1.0), {"step_time_s_p50": 2.0}, {"throughput_tokens_per_s": 5.0}]
    assert accuracy_metrics(runs)["pred_step_time_num_runs"] == 1.0
    assert accuracy_lines([{"tokens_per_s": 1.0}]) == []  # inference, gemm: nothing predicted


def test_the_lines_and_metrics_say_the_factor_for_step_time_only():
    runs = [run(1.0, 1.5, 1.0, 1.05), run(2.0, 3.0, 2.0, 2.5), run(3.0, 4.8, 3.0, 3.1)]
    time_line, mem_line = accuracy_lines(runs)
    assert time_line == (
        "predicted step time: 0 of 3 runs within 30 %; measured 1.50× predicted (median over the "
        "runs), and with that factor divided out 3 of 3 within 30 %; predicted order Spearman 1.00"
    )
    assert (
        mem_line == "predicted peak memory: 2 of 3 runs within 15 %; predicted order Spearman 1.00"
    )
    metrics = accuracy_metrics(runs)
    assert metrics["pred_step_time_common_factor"] == pytest.approx(1.5)
    assert metrics["pred_step_time_within_target_after_common_factor_frac"] == 1.0
    assert metrics["pred_peak_mem_within_target_frac"] == pytest.approx(2 / 3)
    assert "pred_peak_mem_common_factor" not in metrics


def test_the_parent_logs_the_accuracy_of_its_finished_runs_only():
    outcomes = [
        {"status": "FINISHED", "metrics": run(1.0, 1.1)},
        {"status": "FINISHED", "metrics": run(2.0, 3.0)},
        {"status": "FAILED", "metrics": run(1.0, 9.0)},  # a crash's partial figures: not judged
    ]
    metrics, _ = sweep_summary(outcomes, num_jobs=3)
    assert metrics["pred_step_time_num_runs"] == 2.0
    assert metrics["pred_step_time_within_target_frac"] == 0.5


def test_the_lines_are_printed_under_the_sweeps_table(capsys):
    outcomes = [
        {"job": str(i), "strategy": s, "world_size": "2", "status": "FINISHED", "metrics": m}
        for i, (s, m) in enumerate([("dp", run(1.0, 1.5)), ("tp", run(2.0, 3.0))])
    ]
    print_summary(outcomes, title="a sweep")
    printed = capsys.readouterr().out
    table_end = printed.index("every row:")
    assert printed.index("predicted step time: 0 of 2 runs within 30 %; measured 1.50×") > table_end
    assert "predicted peak memory: 2 of 2 runs within 15 %" in printed
