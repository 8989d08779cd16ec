"""A plain single-process training script for the long-sequence recipes: no activation
checkpointing, full activation checkpointing, and `torch.compile` per decoder layer. The
baseline that `python run.py strategy=single world_size=1 batch=seq8k workload.dtype=bf16`
with `activation_checkpointing=full` or `workload.compile=true` is compared against on a GPU
(benchmarks/gpu_runs/). No distbench imports.

Recipe: the model built under `torch.device(device)` in fp32 (random init from --seed), bf16
autocast on CUDA (fp32 on CPU), torch AdamW(lr=1e-4, fused=True on CUDA), sdpa attention, one
micro-batch per step of random token ids, no KV cache (`use_cache=False`). Full checkpointing
wraps every decoder layer in torch's non-reentrant `checkpoint_wrapper`; compile replaces every
decoder layer by `torch.compile(layer)`. Each variant runs in turn in this one process (the
model rebuilt, the caching allocator emptied and its peak reset between them); its step time is
the median of the timed steps (each ends with a device synchronize), its peak
`torch.cuda.max_memory_allocated` (on CPU: none). One JSON line per variant, then one JSON
document of all of them.

    python benchmarks/bare/bare_recipes.py --model-config llama_1b.json --seq-len 8192
    .venv/bin/python benchmarks/bare/bare_recipes.py --device cpu --seq-len 64 --num-steps 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch
from bare_train_ddp import LLAMA_TINY as BARE_DDP_LLAMA_TINY  # benchmarks/bare/ is on sys.path
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    checkpoint_wrapper,
)
from transformers import AutoModelForCausalLM, LlamaConfig

VARIANTS = ("none", "full", "compile")
# The tiny Llama of conf/model/tiny.yaml (bare_train_ddp.py's, beside this script), long enough
# for any --seq-len up to 8192: the default, for a smoke run on CPU.
LLAMA_TINY = {**BARE_DDP_LLAMA_TINY, "max_position_embeddings": 8192}
GIB = 1024**3


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-config", help="a Llama config.json (default: the tiny Llama)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--micro-batch-size", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--num-warmup-steps", type=int, default=3)
    parser.add_argument("--num-steps", type=int, default=10)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--seed", type=int, default=1234)
    return parser.parse_args()


def build_model(args: argparse.Namespace, variant: str, device: torch.device) -> torch.nn.Module:
    """fp32 weights built on the device, the variant's wrapping applied per decoder layer."""
    config_dict = LLAMA_TINY
    if args.model_config:
        with open(args.model_config, encoding="utf-8") as config_file:
            config_dict = json.load(config_file)
    # use_cache=False: a training step keeps no KV cache (built, its per-layer state would also
    # make dynamo recompile each compiled layer until its recompile limit, the rest run eager)
    config = LlamaConfig(
        **config_dict, attn_implementation="sdpa", torch_dtype=torch.float32, use_cache=False
    )
    torch.manual_seed(args.seed)
    with device:
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    layers = model.model.layers
    for index, layer in enumerate(layers):
        if variant == "full":
            layers[index] = checkpoint_wrapper(layer, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
        elif variant == "compile":
            layers[index] = torch.compile(layer)
    return model.train()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_variant(args: argparse.Namespace, variant: str, device: torch.device) -> dict[str, Any]:
    """Build, then time the steps of one variant; its figures as one dict."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    build_start_s = time.perf_counter()
    model = build_model(args, variant, device)
    synchronize(device)
    build_s = time.perf_counter() - build_start_s
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    generator = torch.Generator(device="cpu").manual_seed(args.seed)
    vocab_size = model.config.vocab_size
    step_times_s: list[float] = []
    losses: list[float] = []
    for _ in range(args.num_warmup_steps + args.num_steps):
        tokens = torch.randint(
            vocab_size, (args.micro_batch_size, args.seq_len), generator=generator
        ).to(device)
        synchronize(device)
        step_start_s = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        step_times_s.append(time.perf_counter() - step_start_s)
        losses.append(float(loss.detach()))
    timed_s = step_times_s[args.num_warmup_steps :]
    peak_gib = torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else None
    del model, optimizer
    return {
        "variant": variant,
        "step_time_p50_s": round(statistics.median(timed_s), 4),
        "step_times_s": [round(t, 4) for t in step_times_s],
        "first_step_s": round(step_times_s[0], 3),
        "peak_mem_gib": None if peak_gib is None else round(peak_gib, 3),
        "build_s": round(build_s, 2),
        "tokens_per_step": args.micro_batch_size * args.seq_len,
        "loss_first": round(losses[0], 4),
    }


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    results = []
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            raise SystemExit(f"--variants: {variant!r} is not one of {', '.join(VARIANTS)}")
        results.append(run_variant(args, variant, device))
        print(json.dumps(results[-1]), flush=True)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(json.dumps({"device": device_name, "torch": torch.__version__, "variants": results}))


if __name__ == "__main__":
    main()
