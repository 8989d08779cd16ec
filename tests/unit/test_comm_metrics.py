"""Bus bandwidth, algorithm bandwidth and the α-β fit, against nccl-tests' doc/PERFORMANCE.md
definitions written out by hand here (not recomputed with the code under test)."""

from __future__ import annotations

import math

import pytest

from distbench.workloads.collectives import metrics as cm

pytestmark = pytest.mark.unit

# nccl-tests doc/PERFORMANCE.md: all_reduce 2(n-1)/n; all_gather, reduce_scatter (and
# all_to_all in nccl-tests' alltoall.cu) (n-1)/n; broadcast 1; sendrecv 1.
BUS_FACTORS = {
    2: {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "all_to_all": 0.5},
    4: {"all_reduce": 1.5, "all_gather": 0.75, "reduce_scatter": 0.75, "all_to_all": 0.75},
    8: {"all_reduce": 1.75, "all_gather": 0.875, "reduce_scatter": 0.875, "all_to_all": 0.875},
}


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("op", cm.COLLECTIVES)
def test_bus_factor_is_nccl_tests(n, op):
    want = BUS_FACTORS[n].get(op, 1.0)  # broadcast and send_recv: 1
    assert cm.bus_factor(op, n) == want


def test_one_rank_reductions_move_nothing_and_unknown_ops_are_refused():
    assert cm.bus_factor("all_reduce", 1) == 0.0
    assert cm.bus_factor("broadcast", 1) == 1.0
    with pytest.raises(ValueError, match="unknown collective 'reduce'"):
        cm.bus_factor("reduce", 2)


def test_algbw_is_bytes_over_time_in_1e9_bytes_per_s():
    assert cm.algbw_gbps(2e9, 2.0) == 1.0
    assert cm.algbw_gbps(2**20, 1e-3) == pytest.approx(1.048576)
    with pytest.raises(ValueError):
        cm.algbw_gbps(1024, 0.0)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_busbw_is_algbw_times_bus_factor(n):
    size, time_s = 64 * 2**20, 0.0123
    for op in cm.COLLECTIVES:
        ratio = cm.busbw_gbps(size, time_s, op, n) / cm.algbw_gbps(size, time_s)
        assert ratio == pytest.approx(BUS_FACTORS[n].get(op, 1.0), rel=1e-15)


def test_message_sizes_sweep_like_nccl_tests_b_e_f():
    assert cm.message_sizes(1024, 4 * 2**20, 2) == [1024 * 2**i for i in range(13)]
    assert cm.message_sizes(1024, 5000, 4) == [1024, 4096]
    assert cm.message_sizes(8, 8, 2) == [8]
    with pytest.raises(ValueError):
        cm.message_sizes(1024, 512, 2)


def test_element_count_rounds_split_collectives_to_the_world_size():
    assert cm.element_count(1024, 4, "all_reduce", 3) == 256
    assert cm.element_count(1024, 4, "all_gather", 3) == 255
    assert cm.element_count(1024, 4, "all_to_all", 4) == 256
    assert cm.element_count(2, 4, "reduce_scatter", 4) == 4  # at least one element per rank
    assert cm.element_count(2, 4, "broadcast", 4) == 1


def test_default_size_range_depends_on_device():
    assert cm.default_max_bytes("cuda") == 256 * 2**20
    assert cm.default_max_bytes("cpu") == 4 * 2**20


def test_alpha_beta_fit_recovers_exact_synthetic_data():
    alpha, beta = 25e-6, 12.5e9  # 25 us latency, 12.5 GB/s
    sizes = [1024 * 4**i for i in range(10)]
    times = [alpha + s / beta for s in sizes]
    fit_alpha, fit_beta = cm.fit_alpha_beta(sizes, times)
    assert fit_alpha == pytest.approx(alpha, rel=1e-9)
    assert fit_beta == pytest.approx(beta, rel=1e-9)


def test_alpha_beta_fit_of_a_flat_series_has_no_bandwidth():
    alpha, beta = cm.fit_alpha_beta([1024, 2048, 4096], [1e-3, 1e-3, 1e-3])
    assert alpha == pytest.approx(1e-3)
    assert beta is None
    with pytest.raises(ValueError):
        cm.fit_alpha_beta([1024], [1e-3])
    assert math.isfinite(cm.fit_alpha_beta([1, 2], [1.0, 2.0])[0])
