"""GEMM FLOPs, memory per rank per sharding, what fits on one device, and the check shape."""

from __future__ import annotations

import pytest

from distbench.figures.metrics import BYTES_PER_DTYPE
from distbench.workloads.gemm import metrics as gm

pytestmark = pytest.mark.unit


def test_gemm_flops_is_two_m_k_n():
    assert gm.gemm_flops(2, 3, 5) == 60.0
    assert gm.gemm_flops(4096, 4096, 4096) == 2 * 4096**3
    assert gm.tflops(2e12, 2.0) == 1.0


def test_memory_per_rank_per_sharding():
    m, k, n, p = 8, 4, 6, 2  # A 32, B 24, C 48 elements
    assert gm.elements_per_rank(m, k, n, p, "rows") == 16 + 24 + 48
    assert gm.elements_per_rank(m, k, n, p, "cols") == 32 + 12 + 96
    assert gm.elements_per_rank(m, k, n, p, "k") == 16 + 12 + 48
    assert gm.mem_per_rank_bytes(m, k, n, p, "k", "bf16") == 2 * (16 + 12 + 48)
    assert gm.mem_single_bytes(m, k, n, "fp32") == 4 * (32 + 24 + 48)
    # one rank of the k-sharding holds exactly the single-device problem
    assert gm.mem_per_rank_bytes(m, k, n, 1, "k", "fp32") == gm.mem_single_bytes(m, k, n, "fp32")
    with pytest.raises(ValueError, match="unknown sharding"):
        gm.elements_per_rank(m, k, n, p, "diagonal")


def test_the_labs_out_of_memory_example_is_arithmetic():
    """A 100k^3 fp32 GEMM needs 112 GiB on one device; k-sharded over 8 ranks 65 GiB each."""
    n = 100_000
    assert gm.mem_single_bytes(n, n, n, "fp32") / 2**30 == pytest.approx(111.76, abs=0.01)
    per_rank = gm.mem_per_rank_bytes(n, n, n, 8, "k", "fp32") / 2**30
    assert per_rank == pytest.approx((2 / 8 + 1) * n * n * 4 / 2**30)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_max_square_n_is_the_largest_that_fits(dtype):
    mem = 80 * 2**30
    big_n = gm.max_square_n(mem, dtype)
    assert gm.mem_single_bytes(big_n, big_n, big_n, dtype) <= mem
    assert gm.mem_single_bytes(big_n + 1, big_n + 1, big_n + 1, dtype) > mem


@pytest.mark.parametrize(("sharding", "dim"), [("rows", "m"), ("cols", "n"), ("k", "k")])
def test_check_shape_caps_and_keeps_the_split_dimension_divisible(sharding, dim):
    shape = gm.check_shape(1000, 999, 998, 3, sharding, 256)
    assert shape[dim] == 255 and shape[dim] % 3 == 0
    assert all(v <= 256 for v in shape.values())
    assert gm.check_shape(2, 2, 2, 4, sharding, 256)[dim] == 4


def test_relative_error_and_comm_fraction():
    assert gm.max_rel_err(1e-3, 10.0) == pytest.approx(1e-4)
    assert gm.max_rel_err(0.0, 0.0) == 0.0
    assert gm.comm_fraction(0.25, 1.0) == 0.25
    assert set(gm.MAX_REL_ERR) == set(BYTES_PER_DTYPE)
