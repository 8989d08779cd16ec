"""The decoder layers of a transformers causal LM, or of one pipeline stage of it, found without
naming the architecture, and what the engines do to them: activation checkpointing and
torch.compile per layer (torchtitan's order: TP, then AC, then compile, then FSDP).

- `recomputed_layers(mode, every, n)`: which of n layers recompute (pure; figures/ price it);
- `checkpoint_layers(module, mode, every)`: torch's non-reentrant checkpoint on those layers,
  through transformers' own per-layer switch (`GradientCheckpointingLayer`: it checkpoints the
  layer's `forward`, so FSDP2's module hooks stay outside the recompute, and it drops the KV
  cache a recompute would write twice);
- `compile_layers(module)`: each layer replaced by `torch.compile(layer)` in its parent (the
  wrapper's parameter names gain `_orig_mod.`, which ranks/models.py's init strips).

    python -c "from distbench.ranks.layers import recomputed_layers as r; \\
print(r('selective', 2, 6))"
"""

from __future__ import annotations

from typing import Any

# The ranks' wrappers a decoder layer may sit in: torch.compile's OptimizedModule, torch's
# checkpoint_wrapper.
WRAPPED_ATTRS = ("_orig_mod", "_checkpoint_wrapped_module")


def recomputed_layers(mode: str, every: int, num_layers: int) -> list[int]:
    """The 0-based indices, among `num_layers` decoder layers, of those that recompute their
    forward in backward: none; full: all; selective: every `every`-th (layers every-1,
    2·every-1, ...: torchtitan's selective layer AC counts from 1)."""
    if mode == "full":
        return list(range(num_layers))
    if mode == "selective":
        return [i for i in range(num_layers) if (i + 1) % every == 0]
    return []


def unwrapped(module: Any) -> Any:
    """The module inside any WRAPPED_ATTRS wrappers."""
    while any(hasattr(module, attr) for attr in WRAPPED_ATTRS):
        module = next(getattr(module, a) for a in WRAPPED_ATTRS if hasattr(module, a))
    return module


def is_decoder_layer(module: Any) -> bool:
    """A transformers decoder layer (LlamaDecoderLayer, GPT2Block, ... all derive from
    GradientCheckpointingLayer)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return isinstance(module, GradientCheckpointingLayer)


def decoder_layer_slots(module: Any) -> list[tuple[Any, str]]:
    """(parent, child name) of each decoder layer in `module`, in model order: a model's layer
    list, or a pipeline stage's blocks. A slot holds the layer or the wrapper around it."""
    slots: list[tuple[Any, str]] = []

    def walk(parent: Any) -> None:
        for name, child in parent.named_children():
            if is_decoder_layer(unwrapped(child)):
                slots.append((parent, name))
            else:
                walk(child)

    walk(module)
    return slots


def checkpoint_layers(module: Any, mode: str, every: int) -> int:
    """Turn on torch's non-reentrant checkpoint (use_reentrant=False: it works under ZeRO-3's
    and FSDP2's parameter hooks, and with keyword inputs) on the decoder layers `mode` picks
    (`recomputed_layers`); returns how many."""
    import functools

    from torch.utils.checkpoint import checkpoint

    slots = decoder_layer_slots(module)
    picked = recomputed_layers(mode, every, len(slots))
    for i in picked:
        parent, name = slots[i]
        layer = unwrapped(getattr(parent, name))
        layer.gradient_checkpointing = True
        layer._gradient_checkpointing_func = functools.partial(checkpoint, use_reentrant=False)
    return len(picked)


def compile_layers(module: Any) -> int:
    """Replace each decoder layer by `torch.compile(layer)` in its parent; returns how many.
    Compiling is lazy: the first forward and backward compile (the train loop's first warm-up
    step, timed apart as compile_time_s)."""
    import torch

    slots = decoder_layer_slots(module)
    for parent, name in slots:
        parent.register_module(name, torch.compile(getattr(parent, name)))
    return len(slots)


def compile_events() -> int:
    """How many timed phases of torch.compile (dynamo's trace, AOTAutograd, inductor's codegen,
    the backward's lazy compile) this process has run so far: a step that grew the count
    compiled or recompiled; a step that ran cached graphs did not. It reads torch's private
    timer table (torch._dynamo.utils.compilation_time_metrics, torch 2.13): a torch upgrade
    that moves it fails tests/unit/test_activation_checkpointing.py first."""
    from torch._dynamo import utils

    return sum(len(times) for times in utils.compilation_time_metrics.values())


def checkpoint_and_compile(module: Any, mode: str, every: int, compile_layers_: bool) -> str:
    """`checkpoint_layers`, then (with `compile_layers_`) `compile_layers`, on a model or a
    pipeline stage, in torchtitan's order (AC before compile); returns what was done, one
    line for the rank's log ("" when nothing was)."""
    num_layers = len(decoder_layer_slots(module))
    # A training step needs no KV cache: built, it holds every layer's keys and values until
    # the loss (0.25 GiB for llama_1b at 8192 tokens), and its per-layer state (layer_idx,
    # is_initialized) would make dynamo compile every layer apart instead of one graph for all.
    if getattr(module, "config", None) is not None:
        module.config.use_cache = False
    done = []
    if mode != "none":
        checkpointed = checkpoint_layers(module, mode, every)
        done.append(f"activation checkpointing ({mode}) on {checkpointed} of {num_layers}")
    if compile_layers_:
        done.append(f"torch.compile on {compile_layers(module)} of {num_layers}")
    return "; ".join(done) + " decoder layers" if done else ""
