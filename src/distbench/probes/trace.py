"""A training micro-batch, traced: the real transformers model built on the meta device
(nothing allocated) runs forward and backward under a TorchDispatchMode that records every aten
operation: each GEMM's shape (mm, addmm, bmm, baddbmm), each fused attention call's shape (SDPA
without a mask: one flash / cuDNN kernel each way on a GPU, not meta's math path with its s × s
intermediates), every other kernel's bytes read and written, and the number of kernels (views
launch none). probes/step_parts.py prices a trace with rates timed on the device.

    python -c "from tests.conftest import compose_config, CONF_DIR; \
from distbench.job import resolve_job; from distbench.probes.trace import trace_micro_batch; \
print(trace_micro_batch(resolve_job(compose_config(), CONF_DIR).model, 'fp32', 1, 32))"
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from distbench.compose.schema import ModelConfig

GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm")
# Operations that launch no kernel: views and aliases, and allocations.
NO_KERNEL_OPS = frozenset(
    {
        "_unsafe_view",
        "detach",
        "alias",
        "lift_fresh",
        "empty",
        "empty_strided",
        "empty_like",
        "new_empty",
    }
)


@dataclass
class Trace:
    """What one forward + backward of a micro-batch launches: GEMM shapes (batch, m, k, n)
    with their counts, fused attention calls (AttentionShape: forward and backward counts),
    the bytes each other kernel reads and writes, and the kernel count."""

    gemms: Counter = field(default_factory=Counter)
    attention_forward: Counter = field(default_factory=Counter)
    attention_backward: Counter = field(default_factory=Counter)
    other_bytes: list[int] = field(default_factory=list)

    @property
    def num_kernels(self) -> int:
        attention = sum(self.attention_forward.values()) + sum(self.attention_backward.values())
        return sum(self.gemms.values()) + attention + len(self.other_bytes)


# One fused attention call: query, key, value shapes (batch, heads, seq, head_dim), is_causal,
# enable_gqa. Only mask-free calls are fused here (a mask is traced through the math path).
AttentionShape = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], bool, bool]


def gemm_flops(shape: tuple[int, int, int, int]) -> float:
    """FLOPs of a (batch, m, k, n) GEMM: a multiply and an add per product."""
    batch, m, k, n = shape
    return 2.0 * batch * m * k * n


def attention_forward_flops(shape: AttentionShape) -> float:
    """FLOPs of one attention forward, QKᵀ and AV over the whole s × s (model FLOPs: a causal
    kernel skips about half)."""
    (batch, heads, seq_q, head_dim), (_, _, seq_kv, _) = shape[0], shape[1]
    return 4.0 * batch * heads * seq_q * seq_kv * head_dim


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _gemm_shape(name: str, args: tuple) -> tuple[int, int, int, int]:
    a, b = (args[1], args[2]) if name in ("addmm", "baddbmm") else (args[0], args[1])
    if a.dim() == 3:
        return (a.shape[0], a.shape[1], a.shape[2], b.shape[2])
    return (1, a.shape[0], a.shape[1], b.shape[1])


@contextlib.contextmanager
def fused_attention_recorded(trace: Trace):
    """Within: F.scaled_dot_product_attention without a mask is one forward and one backward
    kernel recorded by shape (on a GPU it is one flash / cuDNN kernel each way; on meta it
    would run the math path, whose s × s intermediates a fused kernel never writes)."""
    import torch
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention

    class FusedAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, query, key, value, shape):
            ctx.shape = shape
            trace.attention_forward[shape] += 1
            out = (*query.shape[:-1], value.shape[-1])
            return torch.empty(out, dtype=query.dtype, device=query.device)

        @staticmethod
        def backward(ctx, grad):
            trace.attention_backward[ctx.shape] += 1
            q, k, v = ctx.shape[:3]
            return (
                *(torch.empty(s, dtype=grad.dtype, device=grad.device) for s in (q, k, v)),
                None,
            )

    def recorded(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        if attn_mask is not None or dropout_p:
            return original(query, key, value, attn_mask, dropout_p, is_causal, **kwargs)
        shape = (
            tuple(query.shape),
            tuple(key.shape),
            tuple(value.shape),
            bool(is_causal),
            bool(kwargs.get("enable_gqa", False)),
        )
        return FusedAttention.apply(query, key, value, shape)

    F.scaled_dot_product_attention = recorded
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def trace_micro_batch(model_cfg: ModelConfig, dtype: str, micro_batch_size: int, seq_len: int):
    """Forward + backward of the model on the meta device, recorded op by op (a Trace)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from distbench.ranks.models import build_meta_model

    trace = Trace()

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name in GEMM_OPS:
                trace.gemms[_gemm_shape(name, args)] += 1
            elif not func.is_view and name not in NO_KERNEL_OPS:
                moved = _tensors(args) + _tensors(kwargs or {}) + _tensors(out)
                num_bytes = sum(t.numel() * t.element_size() for t in moved)
                if num_bytes:  # an empty tensor's op launches nothing
                    trace.other_bytes.append(num_bytes)
            return out

    model = build_meta_model(model_cfg, dtype)
    ids = torch.zeros(micro_batch_size, seq_len, dtype=torch.long, device="meta")
    with Recorder(), fused_attention_recorded(trace):
        model(input_ids=ids, labels=ids).loss.backward()
    return trace
