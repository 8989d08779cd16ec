"""Which memory terms are alive at a training step's peak: what figures/memory.py counts as
resident is not always allocated when the activations peak.

    python -c "from distbench.figures.alive import *; print(forward_end_excess(2e9, 8, 1, 9))"

- gradients: the torch engine frees them after every optimizer step
  (zero_grad(set_to_none=True)); a step of one micro-batch reaches its activation peak, the
  loss's backward, before any gradient exists (`grads_freed_between_steps`);
- autocast's bf16 weight copies (the torch engine's bf16-mixed recipe): the autocast cache
  holds every copy to the end of the forward; afterwards only the saved tensors of backward
  hold them, and a checkpointed layer saved none (`autocast_copies_recomputed`). The forward's
  end can then be the higher peak (`forward_end_excess`).
Pure functions; bytes per device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from distbench.figures.activations import LOSS_PEAK_BYTES_PER_LOGIT
from distbench.figures.params import ParamSplit, params_per_model_shard

if TYPE_CHECKING:
    from distbench.job import Layout

# Bytes per logit alive at the end of the loss's forward under 16-bit autocast: the 16-bit
# logits (held by the model's output), their fp32 upcast and the saved fp32 log-softmax
# (2 + 4 + 4); the backward then holds 12 (activations.LOSS_PEAK_BYTES_PER_LOGIT).
LOSS_FORWARD_BYTES_PER_LOGIT = 10.0


def grads_freed_between_steps(
    grads: float, *, engine: str, grad_accum_steps: int, pp: int, device_is_host: bool
) -> float:
    """The gradient bytes absent at the forward/backward peak (`Memory.grads_transient`): the
    torch engine's zero_grad(set_to_none=True) frees them after every step, so with one
    micro-batch per step (and no pipeline schedule, whose micro-batches overlap) the
    activations peak before any gradient exists. Seen on a GPU (the bare llama_1b 1 × 8192
    rows of benchmarks/gpu_runs/README.md); a CPU rank's RSS keeps its fitted prediction."""
    if engine != "torch" or grad_accum_steps != 1 or pp != 1 or device_is_host:
        return 0.0
    return grads


def autocast_copies_recomputed(
    copies: float,
    split: ParamSplit,
    layout: Layout,
    recomputed_layers: float,
    outside_layers_whole: bool = True,
) -> float:
    """The bytes of autocast's bf16 weight copies (`copies`, this device's) that belong to
    checkpointed decoder layers: the autocast cache holds them to the end of the forward, then
    nothing does (the checkpointed forward saved no tensor; its recompute casts again, one
    layer at a time). outside_layers_whole: as params_per_model_shard (the torch engine's
    embedding and head unless split by vocabulary)."""
    if not copies or not recomputed_layers:
        return 0.0
    shard = params_per_model_shard(
        split, layout.tp, layout.pp, outside_layers_whole=outside_layers_whole
    )
    return copies * min(1.0, recomputed_layers * split.per_layer / layout.tp / shard)


def forward_end_excess(
    copies_recomputed: float, seq_len: int, micro_batch_size: int, vocab_size: float
) -> float:
    """What the end of the forward holds beyond the backward's start when checkpointed layers'
    weight copies die in between: those copies, less the loss's growth from its forward
    (LOSS_FORWARD_BYTES_PER_LOGIT) to its backward peak (LOSS_PEAK_BYTES_PER_LOGIT)."""
    growth = (LOSS_PEAK_BYTES_PER_LOGIT - LOSS_FORWARD_BYTES_PER_LOGIT) * seq_len
    return max(0.0, copies_recomputed - growth * micro_batch_size * vocab_size)


@dataclass(frozen=True)
class Alive:
    """The model states' sums (by Memory field) and terms, and the activation terms, once the
    terms that are not alive at the peak are taken out (`when_alive`)."""

    sums: dict[str, float]
    by_term: dict[str, float]
    acts: dict[str, float]


def when_alive(
    sums: dict[str, float],
    by_term: dict[str, float],
    acts: dict[str, float],
    split: ParamSplit,
    layout: Layout,
    recomputed_layers: float,
    logits_shape: tuple[int, int, float],
    outside_layers_whole: bool = True,
) -> Alive:
    """Autocast's weight copies of the checkpointed layers leave the resident params
    (`autocast_copies_recomputed`); what the forward's end holds beyond the backward's start
    joins the activations as autocast_copies_forward_end (`forward_end_excess`; logits_shape
    is (seq_len, micro_batch_size, this device's vocabulary))."""
    sums, by_term, acts = dict(sums), dict(by_term), dict(acts)
    for name in [k for k in by_term if k.startswith("autocast")]:
        dead = autocast_copies_recomputed(
            by_term[name], split, layout, recomputed_layers, outside_layers_whole
        )
        if dead:
            by_term[name] -= dead
            sums["params"] -= dead
            acts["autocast_copies_forward_end"] = forward_end_excess(dead, *logits_shape)
    return Alive(sums=sums, by_term=by_term, acts=acts)
