"""Metric formulas against values computed by hand."""

from __future__ import annotations

import pytest

from distbench.figures import metrics

pytestmark = pytest.mark.unit


def test_percentiles_interpolate_linearly():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert metrics.percentile(values, 50) == 3.0
    # 90th: rank 0.9 * 4 = 3.6 -> 4 + 0.6 * (10 - 4) = 7.6
    assert metrics.percentile(values, 90) == pytest.approx(7.6)


def test_tokens_per_step_multiplies_only_data_parallel_replicas():
    assert metrics.tokens_per_step(2, 4, 128, dp=3) == 2 * 4 * 128 * 3


def test_palm_flops_per_token():
    # 6N + 12 L H Q T with N = 1e6, L = 4, H*Q = 256, T = 128
    assert metrics.train_flops_per_token(1_000_000, 4, 256, 128) == 6e6 + 12 * 4 * 256 * 128


def test_tflops_mfu_and_cost_by_hand():
    throughput = metrics.throughput_tokens_per_s(4096, 2.0)
    assert throughput == 2048.0
    total = metrics.tflops_total(1e9, throughput)  # 1 GFLOP per token
    assert total == pytest.approx(2.048)
    assert metrics.tflops_per_device(total, 4) == pytest.approx(0.512)
    assert metrics.mfu_pct(0.512, 1.024) == pytest.approx(50.0)
    # 4 devices x $3/h x 2 s = $0.006... per step; / 4096 tokens x 1e6
    assert metrics.cost_usd_per_1m_tokens(4, 3.0, 2.0, 4096) == pytest.approx(
        4 * 3.0 * 2.0 / 3600 / 4096 * 1e6
    )


def test_mfu_refuses_a_missing_peak():
    with pytest.raises(ValueError, match="peak_tflops_per_device=0"):
        metrics.mfu_pct(1.0, 0.0)


def test_train_metrics_names_units_and_ranks():
    out = metrics.train_metrics(
        step_times_s=[1.0, 3.0, 2.0],
        losses=[9.0, 8.5, 8.0],
        peak_mem_bytes_per_rank=[2**30, 3 * 2**30],
        num_tokens_per_step=1000,
        flops_per_token=6e9,
        world_size=2,
        peak_tflops_per_device=10.0,
        price_usd_per_device_hour=1.8,
    )
    assert out["step_time_s_p50"] == 2.0
    assert out["step_time_s_mean"] == 2.0
    assert out["throughput_tokens_per_s"] == 500.0
    assert out["tflops_total"] == pytest.approx(3.0)
    assert out["tflops_per_device"] == pytest.approx(1.5)
    assert out["mfu_pct"] == pytest.approx(15.0)
    assert out["peak_mem_gib"] == 3.0
    assert (out["peak_mem_gib_rank0"], out["peak_mem_gib_rank1"]) == (1.0, 3.0)
    assert (out["loss_first"], out["loss_last"]) == (9.0, 8.0)
    assert out["cost_usd_per_1m_tokens"] == pytest.approx(2 * 1.8 * 2.0 / 3600 / 1000 * 1e6)


def test_no_mfu_without_a_peak():
    out = metrics.train_metrics(
        step_times_s=[1.0],
        losses=[1.0],
        peak_mem_bytes_per_rank=[1],
        num_tokens_per_step=1,
        flops_per_token=1.0,
        world_size=1,
        peak_tflops_per_device=None,
        price_usd_per_device_hour=0.0,
    )
    assert "mfu_pct" not in out
