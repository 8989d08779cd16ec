"""The precision recipe and the optimizer implementation a training job runs, as names.

One recipe means one training on both engines (a grid that compares `ddp` with `dp` compares
strategies, not recipes):

    workload.dtype=fp32                          fp32        everything fp32
    workload.dtype=bf16 workload.precision=mixed bf16-mixed  bf16 compute; fp32 master weights,
                                                             fp32 AdamW states, fp32 gradient
                                                             reduction (DeepSpeed's bf16 block with
                                                             fp32 grad accumulation and
                                                             communication; torch autocast, or
                                                             FSDP2 MixedPrecisionPolicy(bf16,
                                                             reduce fp32))
    workload.dtype=bf16 workload.precision=pure  bf16-pure   weights, gradients and AdamW states
                                                             in bf16 (torch engine only: DeepSpeed
                                                             keeps fp32 master weights)

(`pure`, not Lightning's `true`: Hydra reads `true` as a boolean.) `optimizer_impl` is torch's
AdamW kernel: `fused` (one kernel per parameter group, CUDA and CPU), `foreach` (multi-tensor)
or `for-loop`; both engines get the same torch AdamW (DeepSpeed takes it as a client optimizer).

    python -c "from distbench.precision import precision_tag; print(precision_tag('bf16', 'mixed'))"
"""

from __future__ import annotations

PRECISIONS = ("mixed", "pure")
OPTIMIZER_IMPLS = ("auto", "fused", "foreach", "for-loop")


def precision_tag(dtype: str, precision: str) -> str:
    """The recipe's name: fp32, bf16-mixed, bf16-pure, fp16-mixed, fp16-pure."""
    return "fp32" if dtype == "fp32" else f"{dtype}-{precision}"


def is_mixed(dtype: str, precision: str) -> bool:
    """fp32 master weights with low-precision compute (bf16-mixed, 16-mixed)."""
    return dtype != "fp32" and precision == "mixed"


def weights_dtype(dtype: str, precision: str) -> str:
    """The dtype the model's weights (and AdamW states) are kept in."""
    return "fp32" if is_mixed(dtype, precision) else dtype


def resolve_optimizer_impl(chosen: str) -> str:
    """`auto` is torch's fused AdamW (it has CUDA and CPU kernels, DTensor included); the other
    values are taken as given."""
    return "fused" if chosen == "auto" else chosen


def adamw_kwargs(impl: str) -> dict[str, bool]:
    """torch.optim.AdamW's keyword arguments for an implementation name."""
    return {
        "fused": {"fused": True, "foreach": False},
        "foreach": {"fused": False, "foreach": True},
        "for-loop": {"fused": False, "foreach": False},
    }[impl]
