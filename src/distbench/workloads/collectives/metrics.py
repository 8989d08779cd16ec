"""Collective-communication figures as pure functions: message sizes, algorithm and bus
bandwidth exactly as nccl-tests defines them, and an α-β (latency-bandwidth) fit. No torch.

Source for the bandwidths: NVIDIA nccl-tests, doc/PERFORMANCE.md ("Performance reported by NCCL
tests"): algbw = S / t with S the operation's size in bytes (nccl-tests' `size` column: the
whole buffer for all_reduce and broadcast, the gathered output for all_gather, the input for
reduce_scatter, the per-rank buffer for all_to_all, the sent buffer for send/recv), and
busbw = algbw × a bus factor that makes the figure comparable with the hardware's link speed.
GB/s there means 1e9 bytes per second.

    python -c "import distbench.workloads.collectives.metrics as m
print(m.busbw_gbps(2**20, 1e-3, 'all_gather', 4))"
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv")
# Collectives whose buffer is split into one chunk per rank: the element count is rounded down to
# a multiple of the world size, as nccl-tests does.
SPLIT_COLLECTIVES = ("all_gather", "reduce_scatter", "all_to_all")


def bus_factor(collective: str, world_size: int) -> float:
    """nccl-tests' bus-bandwidth factor for n ranks (doc/PERFORMANCE.md):

    all_reduce 2(n-1)/n; all_gather, reduce_scatter and all_to_all (n-1)/n; broadcast 1;
    send/recv 1. (With n = 1 the reductions move no data: factor 0.)"""
    n = world_size
    if n < 1:
        raise ValueError(f"world_size={n} must be >= 1")
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in SPLIT_COLLECTIVES:
        return (n - 1) / n
    if collective in ("broadcast", "send_recv"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}; choose one of {list(COLLECTIVES)}")


def algbw_gbps(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 B/s): size / time (nccl-tests doc/PERFORMANCE.md)."""
    if time_s <= 0:
        raise ValueError(f"time_s={time_s} must be > 0")
    return size_bytes / time_s / 1e9


def busbw_gbps(size_bytes: float, time_s: float, collective: str, world_size: int) -> float:
    """Bus bandwidth in GB/s: algbw × bus_factor(collective, n) (nccl-tests PERFORMANCE.md)."""
    return algbw_gbps(size_bytes, time_s) * bus_factor(collective, world_size)


def busbw_avg_gbps(busbw_values_gbps: Sequence[float]) -> float:
    """nccl-tests' "Avg bus bandwidth": the arithmetic mean of the busbw of every line it ran
    (src/common.cu adds each size's busbw and divides by their number), in GB/s."""
    if not len(busbw_values_gbps):
        raise ValueError("the average bus bandwidth of no measurement")
    return float(np.mean(np.asarray(busbw_values_gbps, dtype=float)))


def nccl_tests_count(collective: str, count: int, world_size: int) -> int:
    """The element count nccl-tests' `count` column shows for a message of `count` elements:
    the count handed to the NCCL call, per rank for the split collectives (all_gather's send
    count, reduce_scatter's receive count, all_to_all's count per peer)."""
    return count // world_size if collective in SPLIT_COLLECTIVES else count


def message_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """min, min·f, min·f², ... up to max inclusive (nccl-tests' -b/-e/-f sweep)."""
    if min_bytes < 1 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"bad size range {min_bytes}..{max_bytes} x{factor}")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def element_count(size_bytes: int, element_bytes: int, collective: str, world_size: int) -> int:
    """Elements of a message of about size_bytes: size / element size, rounded down to a
    multiple of the world size for the split collectives (nccl-tests does the same); at least
    one element (one per rank when split)."""
    count = size_bytes // element_bytes
    if collective in SPLIT_COLLECTIVES:
        count -= count % world_size
        return max(count, world_size)
    return max(count, 1)


def default_max_bytes(device: str) -> int:
    """The top of the default size range: 256 MiB on GPUs (as nccl-tests' usual -e 256M), 4 MiB
    on CPU ranks, where gloo moves ~1 GB/s and a 2-rank sweep must stay well under a minute."""
    return 256 * 2**20 if device == "cuda" else 4 * 2**20


def fit_alpha_beta(
    sizes_bytes: Sequence[float], times_s: Sequence[float]
) -> tuple[float, float | None]:
    """Fit t = α + S/β (the α-β or Hockney model) over a size sweep; returns (α in s, β in B/s).

    Least squares on relative residuals ((t_i - α - S_i/β) / t_i, i.e. weights 1/t_i), so the
    small messages that fix α count as much as the large ones that fix β; exact data is
    recovered exactly under any weighting. β is None when the fitted time does not grow with
    size (all messages latency-bound): no bandwidth can be read from such a series."""
    s = np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    if s.size < 2 or s.size != t.size or np.any(t <= 0):
        raise ValueError("need >= 2 (size, time > 0) points of equal length")
    design = np.stack([np.ones_like(s), s], axis=1) / t[:, None]
    (alpha, inv_beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    beta = 1.0 / inv_beta if inv_beta > 0 and math.isfinite(1.0 / inv_beta) else None
    return float(alpha), beta
