"""Distributed-GEMM figures as pure functions: FLOPs, memory per rank for each sharding, the
largest square problem that fits, and the correctness tolerance per dtype. No torch.

C[m, n] = A[m, k] @ B[k, n] sharded over p ranks:
    rows  A split by rows, B broadcast, each rank computes C rows, all_gather of C
    cols  B split by columns, A broadcast, each rank computes C columns, all_gather of C
    k     A split by columns and B by rows (the inner dimension), partial C, all_reduce

    python -c "import distbench.workloads.gemm.metrics as m; print(m.gemm_flops(4096, 4096, 4096))"
"""

from __future__ import annotations

import math

from distbench.figures.metrics import BYTES_PER_DTYPE

SHARDINGS = ("rows", "cols", "k")
# max|C - C_ref| / max|C_ref| allowed against a float64 reference: a few hundred units of
# round-off of the dtype (unit round-off 2**-24 fp32, 2**-11 fp16, 2**-8 bf16) for a k-long
# dot product whose partial sums ranks add in another order.
MAX_REL_ERR = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 5e-2}


def gemm_flops(m: int, k: int, n: int) -> float:
    """FLOPs of C = A @ B with A [m, k], B [k, n]: 2·m·k·n (one multiply and one add per term)."""
    return 2.0 * m * k * n


def tflops(flops: float, time_s: float) -> float:
    """TFLOP/s: FLOPs / seconds / 1e12."""
    if time_s <= 0:
        raise ValueError(f"time_s={time_s} must be > 0")
    return flops / time_s / 1e12


def sharded_dim(sharding: str) -> str:
    """Which of m, k, n a sharding splits across ranks (it must divide by the world size)."""
    return {"rows": "m", "cols": "n", "k": "k"}[sharding]


def elements_per_rank(m: int, k: int, n: int, p: int, sharding: str) -> int:
    """Elements one rank holds for one sharded GEMM over p ranks, as workloads/gemm/sharding.py
    allocates them (inputs, then the full C that the collective fills):

    rows: A/p + B + C (the local rows are written in place into C's slice, then all_gather);
    cols: A + B/p + 2C (columns are gathered rank-major, then laid out as [m, n]);
    k:    A/p + B/p + C (partial C, all_reduce in place)."""
    a, b, c = m * k, k * n, m * n
    if sharding == "rows":
        return a // p + b + c
    if sharding == "cols":
        return a + b // p + 2 * c
    if sharding == "k":
        return a // p + b // p + c
    raise ValueError(f"unknown sharding {sharding!r}; choose one of {list(SHARDINGS)}")


def mem_per_rank_bytes(m: int, k: int, n: int, p: int, sharding: str, dtype: str) -> int:
    """Bytes of A, B and C shards one rank holds (elements_per_rank × bytes per element)."""
    return elements_per_rank(m, k, n, p, sharding) * BYTES_PER_DTYPE[dtype]


def mem_single_bytes(m: int, k: int, n: int, dtype: str) -> int:
    """Bytes of A, B and C on one device: (m·k + k·n + m·n) × bytes per element."""
    return (m * k + k * n + m * n) * BYTES_PER_DTYPE[dtype]


def max_square_n(mem_bytes: float, dtype: str) -> int:
    """The largest N whose square GEMM (A, B, C all N×N) fits in mem_bytes: 3·N²·b ≤ mem.
    Pure arithmetic, no allocator overhead or workspace counted."""
    return math.isqrt(int(mem_bytes // (3 * BYTES_PER_DTYPE[dtype])))


def check_shape(m: int, k: int, n: int, p: int, sharding: str, max_dim: int) -> dict[str, int]:
    """The smaller problem checked against a single-device reference: each dimension capped at
    max_dim, the sharded one rounded down to a multiple of p (at least p)."""
    dims = {"m": min(m, max_dim), "k": min(k, max_dim), "n": min(n, max_dim)}
    split = sharded_dim(sharding)
    dims[split] = max(p, dims[split] - dims[split] % p)
    return dims


def max_rel_err(max_abs_err: float, max_abs_ref: float) -> float:
    """Normwise relative error: max|C - C_ref| / max|C_ref| (0 when both are 0)."""
    if max_abs_ref == 0:
        return 0.0 if max_abs_err == 0 else math.inf
    return max_abs_err / max_abs_ref


def comm_fraction(comm_time_s: float, gemm_time_s: float) -> float:
    """Share of the GEMM's time spent communicating: comm_time_s_p50 / gemm_time_s_p50."""
    return comm_time_s / gemm_time_s if gemm_time_s > 0 else 0.0
