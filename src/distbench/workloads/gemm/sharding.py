"""The three ways to split C = A @ B over p ranks, in plain torch.distributed (every rank).

    rows  A [m/p, k] local; B broadcast from rank 0; C rows written into C's slice; all_gather
    cols  B [k, n/p] local; A broadcast from rank 0; C columns gathered rank-major, laid out
    k     A [m, k/p] and B [k/p, n] local; partial C; all_reduce (sum)

`Buffers` holds one problem's tensors; `step()` runs it once and returns (comm_s, compute_s),
each phase closed by a device sync so the host clock brackets it. Memory per rank is what
gemm_metrics.elements_per_rank counts.

    python run.py workload=gemm gemm.sharding=k world_size=2
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass
class Buffers:
    sharding: str
    a: Any  # this rank's A (rows: A/p; cols: all of A, real on rank 0; k: A[:, k/p])
    b: Any  # this rank's B (rows: all of B, real on rank 0; cols: B[:, n/p]; k: B[k/p, :])
    c: Any  # the full C [m, n] every rank ends with
    gathered: Any = None  # cols only: [p, m, n/p] before the layout to [m, n]


def shards(full_a, full_b, rank: int, p: int, sharding: str) -> tuple[Any, Any]:
    """This rank's (A, B) from the full matrices. The broadcast operand stays whole but only
    rank 0's copy holds data: the others' is zeroed, so the broadcast must deliver it."""
    if sharding == "rows":
        b = full_b.clone() if rank == 0 else full_b.new_zeros(full_b.shape)
        return full_a.chunk(p, dim=0)[rank].contiguous(), b
    if sharding == "cols":
        a = full_a.clone() if rank == 0 else full_a.new_zeros(full_a.shape)
        return a, full_b.chunk(p, dim=1)[rank].contiguous()
    return full_a.chunk(p, dim=1)[rank].contiguous(), full_b.chunk(p, dim=0)[rank].contiguous()


def random_shards(m: int, k: int, n: int, p: int, sharding: str, dtype, device: str, seed: int):
    """Shard-shaped random inputs for timing, made directly on the device (no full A or B)."""
    import torch

    torch.manual_seed(seed)
    shape_a = {"rows": (m // p, k), "cols": (m, k), "k": (m, k // p)}[sharding]
    shape_b = {"rows": (k, n), "cols": (k, n // p), "k": (k // p, n)}[sharding]
    return (
        torch.randn(shape_a, dtype=dtype, device=device),
        torch.randn(shape_b, dtype=dtype, device=device),
    )


def allocate(a, b, m: int, n: int, p: int, sharding: str) -> Buffers:
    """The output buffers for one sharded problem whose local inputs are a and b."""
    import torch

    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    gathered = None
    if sharding == "cols":
        gathered = torch.empty((p, m, n // p), dtype=a.dtype, device=a.device)
    return Buffers(sharding=sharding, a=a, b=b, c=c, gathered=gathered)


def all_gather(out, inp) -> None:
    """all_gather of equal contiguous tensors into one, as flat buffers (gloo splits the output
    along dim 0 and wants each piece shaped like the input); torch >= 2.13 names it
    all_gather_single."""
    import torch.distributed as dist

    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out.view(-1), inp.view(-1))


def step(buf: Buffers, rank: int, p: int, device: str) -> tuple[float, float]:
    """One distributed GEMM into buf.c; returns (communication s, local compute s)."""
    import torch
    import torch.distributed as dist

    from distbench.ranks.dist import synchronize

    t0 = time.perf_counter()
    if buf.sharding == "rows":
        dist.broadcast(buf.b, src=0)
        synchronize(device)
        t1 = time.perf_counter()
        local = buf.c.chunk(p, dim=0)[rank]  # a contiguous row block of C
        torch.matmul(buf.a, buf.b, out=local)
        synchronize(device)
        t2 = time.perf_counter()
        all_gather(buf.c, local)  # in place: the input is this rank's slice of C
    elif buf.sharding == "cols":
        dist.broadcast(buf.a, src=0)
        synchronize(device)
        t1 = time.perf_counter()
        torch.matmul(buf.a, buf.b, out=buf.gathered[rank])
        synchronize(device)
        t2 = time.perf_counter()
        all_gather(buf.gathered, buf.gathered[rank])
        buf.c.view(buf.c.shape[0], p, -1).copy_(buf.gathered.permute(1, 0, 2))
    else:
        t1 = t0
        torch.matmul(buf.a, buf.b, out=buf.c)
        synchronize(device)
        t2 = time.perf_counter()
        dist.all_reduce(buf.c)
    synchronize(device)
    t3 = time.perf_counter()
    return (t1 - t0) + (t3 - t2), t2 - t1


def single_step(a, b, c, device: str) -> tuple[float, float]:
    """The single-device GEMM: no communication, all compute."""
    import torch

    from distbench.ranks.dist import synchronize

    t0 = time.perf_counter()
    torch.matmul(a, b, out=c)
    synchronize(device)
    return 0.0, time.perf_counter() - t0
