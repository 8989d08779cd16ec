"""A plain torchrun + DeepSpeed (ZeRO stage 0) training script: the baseline that
benchmarks/harness_overhead.py times distbench's `strategy=dp` against. No distbench imports.

Same workload as `python run.py strategy=dp world_size=2` with the defaults: the tiny Llama of
conf/model/tiny.yaml (the weights in --weights, or a random init from seed 1234; fp32, sdpa
attention), batch `small` (2 sequences × 2 micro-steps × 128 tokens per rank), torch
AdamW(lr=1e-4, fused=True) handed to
DeepSpeed with the zero_optimization block of conf/ds_zero/0.yaml; step s's global batch is
drawn from (seed, s) and each rank takes its rows; each step is bracketed by a barrier and its
time is the slowest rank's. Rank 0 prints one JSON line: per-step times and losses.

DeepSpeed on CPU wants DS_ACCELERATOR=cpu and LOCAL_SIZE (its shared-memory all-reduce; its own
launcher sets it, torchrun does not):

    DS_ACCELERATOR=cpu LOCAL_SIZE=2 OMP_NUM_THREADS=1 .venv/bin/python -m torch.distributed.run \
        --nproc_per_node=2 benchmarks/bare/bare_train_deepspeed.py --num-steps 10
"""

from __future__ import annotations

import argparse
import json
import os
import time

import deepspeed
import torch
import torch.distributed as dist
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig

# conf/model/tiny.yaml (and the model schema's defaults: untied embeddings, sdpa)
LLAMA_TINY = {
    "vocab_size": 8192,
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "intermediate_size": 688,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": False,
}
MICRO_BATCH_SIZE, GRAD_ACCUM_STEPS, SEQ_LEN = 2, 2, 128  # conf/batch/small.yaml
LR, SEED = 1e-4, 1234  # conf/workload/train.yaml
DS_CONFIG = {
    "train_micro_batch_size_per_gpu": MICRO_BATCH_SIZE,
    "gradient_accumulation_steps": GRAD_ACCUM_STEPS,
    # conf/ds_zero/0.yaml
    "zero_optimization": {
        "stage": 0,
        "reduce_bucket_size": 5_000_000,
        "allgather_bucket_size": 5_000_000,
    },
    "zero_force_ds_cpu_optimizer": False,  # torch's AdamW, no DeepSpeed Adam kernel
    "gradient_clipping": 0.0,
    "steps_per_print": 2**31 - 1,
    "wall_clock_breakdown": False,
    "bf16": {"enabled": False},
    "fp16": {"enabled": False},
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-warmup-steps", type=int, default=3)
    parser.add_argument("--num-steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--model-config",
        help="a transformers config.json to build (random init, on the device); default: the "
        "tiny Llama above",
    )
    parser.add_argument(
        "--batch",
        default=f"{MICRO_BATCH_SIZE},{GRAD_ACCUM_STEPS},{SEQ_LEN}",
        help="micro_batch_size,grad_accum_steps,seq_len",
    )
    parser.add_argument(
        "--dtype",
        choices=["fp32", "bf16"],
        default="fp32",
        help="bf16: bf16 compute with fp32 master weights and AdamW states",
    )
    parser.add_argument(
        "--weights",
        help="a save_pretrained directory to start from (the harness passes the "
        "weights distbench starts from); default: transformers' random init from --seed",
    )
    return parser.parse_args()


def build_model(args: argparse.Namespace, device: torch.device) -> torch.nn.Module:
    """fp32 weights (bf16 runs autocast / DeepSpeed's bf16 block over them): the saved start
    weights, or a random init from --seed built straight on the device."""
    if args.weights:
        model = AutoModelForCausalLM.from_pretrained(args.weights, attn_implementation="sdpa")
        return model.to(torch.float32).to(device).train()
    torch.manual_seed(args.seed)
    if args.model_config:
        config = AutoConfig.from_pretrained(args.model_config)
    else:
        config = LlamaConfig(**LLAMA_TINY)
    with device:
        model = AutoModelForCausalLM.from_config(
            config, attn_implementation="sdpa", dtype=torch.float32
        )
    return model.train()


def ds_config(args: argparse.Namespace) -> dict:
    """DS_CONFIG for --batch and --dtype (bf16: DeepSpeed's bf16 block, fp32 master weights,
    gradients reduced in fp32, as distbench configures ZeRO-0)."""
    micro, accum, _ = batch_shape(args)
    config = dict(DS_CONFIG, train_micro_batch_size_per_gpu=micro)
    config["gradient_accumulation_steps"] = accum
    if args.dtype == "bf16":
        config["bf16"] = {"enabled": True}
        config["communication_data_type"] = "fp32"
    return config


def batch_shape(args: argparse.Namespace) -> tuple[int, int, int]:
    """(micro_batch_size, grad_accum_steps, seq_len) from --batch."""
    micro, accum, seq = (int(n) for n in args.batch.split(","))
    return micro, accum, seq


def rank_batch(
    args: argparse.Namespace, vocab_size: int, step: int, rank: int, world_size: int
) -> list[torch.Tensor]:
    """This rank's micro-batches of step `step`'s global batch (drawn from seed and step)."""
    micro, accum, seq = batch_shape(args)
    generator = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    shape = (accum, world_size * micro, seq)
    tokens = torch.randint(0, vocab_size, shape, generator=generator)
    rows = slice(rank * micro, (rank + 1) * micro)
    return [tokens[g, rows].contiguous() for g in range(accum)]


def train_step(engine, micro_batches: list) -> float:
    """forward, backward, step per micro-batch: DeepSpeed scales the loss by 1/accumulation
    steps and steps the optimizer at the accumulation boundary."""
    losses = []
    for mb in micro_batches:
        loss = engine(input_ids=mb, labels=mb).loss
        engine.backward(loss)
        engine.step()
        losses.append(loss.detach())
    return float(sum(losses) / len(losses))


def rank_device(device: str) -> torch.device:
    """This rank's device: its GPU (LOCAL_RANK) under --device cuda, else the CPU."""
    if device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so the host clock brackets the step."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def train(args: argparse.Namespace, rank: int, world_size: int) -> tuple[list, list]:
    """Warm-up + timed steps: this rank's step times (s) and losses. The engine is freed on
    return, before the process group is destroyed."""
    device = rank_device(args.device)
    model = build_model(args, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, fused=True)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config(args))
    step_times_s, losses = [], []
    for step in range(args.num_warmup_steps + args.num_steps):
        vocab_size = model.config.vocab_size
        micro_batches = [
            mb.to(device) for mb in rank_batch(args, vocab_size, step, rank, world_size)
        ]
        dist.barrier()
        synchronize(device)
        start = time.perf_counter()
        losses.append(train_step(engine, micro_batches))
        synchronize(device)
        step_times_s.append(time.perf_counter() - start)
    return step_times_s, losses


def main() -> None:
    args = parse_args()
    deepspeed.init_distributed(dist_backend="nccl" if args.device == "cuda" else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    step_times_s, losses = train(args, rank, world_size)
    per_rank: list = [None] * world_size
    dist.all_gather_object(per_rank, (step_times_s, losses))
    if rank == 0:
        times = [max(r[0][i] for r in per_rank) for i in range(len(step_times_s))]
        mean_losses = [sum(r[1][i] for r in per_rank) / world_size for i in range(len(losses))]
        line = {"num_warmup_steps": args.num_warmup_steps, "step_times_s": times}
        print(json.dumps({**line, "losses": mean_losses}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
