"""The six collectives of the collectives workload in plain torch.distributed, each with its
buffers, its call (native, or the standard equivalent where the backend lacks it) and a check
of its result in place. Message sizes follow nccl-tests (see metrics.py).

    op            buffers (count = elements of the message)      native call
    all_reduce    buf[count]                                     all_reduce
    all_gather    out[count], in = out's slice of this rank      all_gather_into_tensor
    reduce_scatter in[count], out[count/n]                       reduce_scatter_tensor
    broadcast     buf[count] from rank 0                         broadcast
    all_to_all    in[count], out[count], chunk j to/from rank j  all_to_all_single
    send_recv     send[count] to rank+1, recv[count] from rank-1 isend / irecv (a ring)

Check pattern: element i of rank r holds base(i)·(r+1) with base(i) = i mod 7 + 1, small
integers that fp32 sums exactly.
"""

from __future__ import annotations

from typing import Any

# The standard equivalent used where a backend lacks the native collective.
EMULATIONS = {
    "all_gather": "all_gather (tensor list)",
    "reduce_scatter": "all_reduce + slice",
    "all_to_all": "isend/irecv to each peer",
}
# Allowed relative error of the check per dtype: exact in fp32; one rounding step otherwise.
CHECK_RTOL = {"fp32": 0.0, "bf16": 1e-2, "fp16": 1e-3}


def _base(count: int, device: str):
    import torch

    return (torch.arange(count, device=device) % 7 + 1).double()


def make(op: str, count: int, dtype, device: str, rank: int, n: int) -> dict[str, Any]:
    """Zeroed buffers of one message of `count` elements."""
    import torch

    def zeros(c: int):
        return torch.zeros(c, dtype=dtype, device=device)

    if op in ("all_reduce", "broadcast"):
        return {"buf": zeros(count)}
    if op == "all_gather":
        out = zeros(count)
        return {"out": out, "in": out.chunk(n)[rank]}
    if op == "reduce_scatter":
        return {"in": zeros(count), "out": zeros(count // n)}
    if op == "all_to_all":
        return {"in": zeros(count), "out": zeros(count)}
    if op == "send_recv":
        return {"send": zeros(count), "recv": zeros(count)}
    raise ValueError(f"unknown collective {op!r}")


def call(op: str, bufs: dict[str, Any], rank: int, n: int, emulate: bool) -> None:
    """Run the collective once on its buffers (the emulation when `emulate`)."""
    import torch.distributed as dist

    if op == "all_reduce":
        dist.all_reduce(bufs["buf"])
    elif op == "broadcast":
        dist.broadcast(bufs["buf"], src=0)
    elif op == "all_gather":
        if emulate:
            dist.all_gather(list(bufs["out"].chunk(n)), bufs["in"].clone())
        else:
            _native("all_gather_single", "all_gather_into_tensor")(bufs["out"], bufs["in"])
    elif op == "reduce_scatter":
        if emulate:
            dist.all_reduce(bufs["in"])
            bufs["out"].copy_(bufs["in"].chunk(n)[rank])
        else:
            _native("reduce_scatter_single", "reduce_scatter_tensor")(bufs["out"], bufs["in"])
    elif op == "all_to_all":
        if emulate:
            _all_to_all_p2p(bufs["out"], bufs["in"], rank, n)
        else:
            dist.all_to_all_single(bufs["out"], bufs["in"])
    elif op == "send_recv":
        requests = [
            dist.isend(bufs["send"], (rank + 1) % n),
            dist.irecv(bufs["recv"], (rank - 1) % n),
        ]
        for request in requests:
            request.wait()
    else:
        raise ValueError(f"unknown collective {op!r}")


def _native(name: str, older_name: str):
    """torch.distributed's function by its current name (torch >= 2.13 renamed the tensor
    all_gather / reduce_scatter to *_single and deprecated the old names), else the old one."""
    import torch.distributed as dist

    return getattr(dist, name, None) or getattr(dist, older_name)


def _all_to_all_p2p(out, inp, rank: int, n: int) -> None:
    import torch.distributed as dist

    outs, ins = out.chunk(n), inp.chunk(n)
    outs[rank].copy_(ins[rank])
    requests = []
    for peer in range(n):
        if peer != rank:
            requests.append(dist.isend(ins[peer], peer))
            requests.append(dist.irecv(outs[peer], peer))
    for request in requests:
        request.wait()


def fill(op: str, bufs: dict[str, Any], rank: int, n: int) -> None:
    """Write the check pattern into the inputs (zero the outputs)."""
    for tensor in bufs.values():
        tensor.zero_()
    device = next(iter(bufs.values())).device
    if op == "all_reduce":
        bufs["buf"].copy_(_base(bufs["buf"].numel(), device) * (rank + 1))
    elif op == "broadcast":
        if rank == 0:
            bufs["buf"].copy_(_base(bufs["buf"].numel(), device))
    elif op in ("all_gather", "reduce_scatter"):
        bufs["in"].copy_(_base(bufs["in"].numel(), device) * (rank + 1))
    elif op == "all_to_all":
        for j, chunk in enumerate(bufs["in"].chunk(n)):  # chunk j goes to rank j
            chunk.copy_(_base(chunk.numel(), device) * (rank * n + j + 1))
    elif op == "send_recv":
        bufs["send"].copy_(_base(bufs["send"].numel(), device) * (rank + 1))


def expected(op: str, bufs: dict[str, Any], rank: int, n: int):
    """(the output tensor to check, what it must hold) after call() on fill()'s pattern."""
    import torch

    total = n * (n + 1) / 2  # sum over ranks of (r + 1)
    if op in ("all_reduce", "broadcast"):
        out = bufs["buf"]
        scale = total if op == "all_reduce" else 1.0
        return out, _base(out.numel(), out.device) * scale
    if op == "all_gather":
        out = bufs["out"]
        parts = [_base(c.numel(), out.device) * (j + 1) for j, c in enumerate(out.chunk(n))]
        return out, torch.cat(parts)
    if op == "reduce_scatter":
        full = _base(bufs["in"].numel(), bufs["in"].device) * total
        return bufs["out"], full.chunk(n)[rank]
    if op == "all_to_all":
        out = bufs["out"]
        parts = [
            _base(c.numel(), out.device) * (j * n + rank + 1) for j, c in enumerate(out.chunk(n))
        ]
        return out, torch.cat(parts)
    out = bufs["recv"]
    return out, _base(out.numel(), out.device) * ((rank - 1) % n + 1)


def check(op: str, bufs: dict[str, Any], rank: int, n: int, rtol: float) -> tuple[float, int]:
    """(largest relative deviation of this rank's result from the expected values, elements
    further than `rtol` from them: nccl-tests' #wrong column)."""
    out, want = expected(op, bufs, rank, n)
    rel = (out.double() - want).abs() / want.abs().clamp(min=1.0)
    return float(rel.max().item()), int((rel > rtol).sum().item())


def native_supported(op: str, device: str) -> bool:
    """Whether the backend runs the native call (tried on a tiny message, agreed by all ranks:
    a collective is used natively only if every rank could run it)."""
    import torch
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    try:
        call(op, make(op, n, torch.float32, device, rank, n), rank, n, emulate=False)
        ok = 1.0
    except (RuntimeError, NotImplementedError, ValueError):
        ok = 0.0
    flag = torch.tensor([ok], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())
