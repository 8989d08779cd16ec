"""The inference workload: prefill + greedy decode of `inference.num_new_tokens` for a batch of
prompts, under data-parallel replicas (strategy.tp = 1) or tensor parallelism (strategy.tp > 1).

Every layout sees the same prompts: step s's global prompt batch [dp × batch_size, prompt_len]
is drawn from (seed, s), as the train workload draws its batches, and each data-parallel
replica takes its rows; the ranks of one tensor-parallel group share their replica's rows.
Tensor parallelism is DeepSpeed's AutoTP inference path,
`deepspeed.init_inference(model, tensor_parallel=...)`: it splits every attention and MLP
projection of a transformers model across the group and all-reduces their outputs
(DeepSpeed's shared-memory kernel on CPU when the group is the whole node, else the process
group's all_reduce).

Decoding is a manual loop, not `model.generate()`: one prefill forward over the prompts (its
last-position logits give the first new token; its time is the time to first token), then
num_new_tokens − 1 single-token forwards on the KV cache, each taking the argmax (greedy). The
prompts have equal length and no padding, so no attention mask is passed (the causal mask
alone): a 2-D mask would cost a concatenation per token and, in transformers' check that it
masks nothing, a device-to-host sync per forward on a GPU. No EOS stops a row, so every row
yields exactly num_new_tokens (benchmarks/decode_vs_generate.py compares this loop with
transformers' `generate`).
Each request batch is bracketed by a barrier and device syncs; its prefill and decode times are
the slowest rank's (combine()).

    python run.py workload=inference strategy=tp world_size=2 inference.num_new_tokens=32
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from distbench.figures.metrics import GIB
from distbench.job import Job, Layout
from distbench.ranks.models import count_params
from distbench.workloads import Measured
from distbench.workloads.inference import inference_sizes
from distbench.workloads.inference.metrics import decode_bandwidth_metrics, inference_metrics

TOP_K_LOGITS = 8  # first-step logits kept per row in result.json (for correctness checks)


def prompt_batch(seed: int, step: int, num_rows: int, prompt_len: int, vocab_size: int):
    """Token ids [num_rows, prompt_len] of one request batch, fixed by (seed, step)."""
    import torch

    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, vocab_size, (num_rows, prompt_len), generator=generator)


def replica_rows(prompts, dp_rank: int, batch_size: int):
    """This replica's prompts: rows [dp_rank * batch_size, (dp_rank + 1) * batch_size)."""
    return prompts[dp_rank * batch_size : (dp_rank + 1) * batch_size].contiguous()


def cache_keyword(model: Any) -> str:
    """The name the model's forward takes its KV cache under: `cache` (transformers 5.x, where
    `past_key_values` is a deprecated alias) or `past_key_values`."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def greedy_decode(model: Any, prompts, num_new_tokens: int, device: str) -> dict[str, Any]:
    """Prefill + num_new_tokens − 1 KV-cache decode steps, greedy, no attention mask (equal
    prompt lengths, no padding). Returns the new tokens [B, num_new_tokens], the prefill's
    last-position logits [B, vocab] and the seconds of the prefill (through the first token)
    and of the decode steps, device-synced."""
    import torch

    from distbench.ranks.dist import synchronize

    prompts = prompts.to(device)
    key = cache_keyword(model)
    with torch.inference_mode():
        synchronize(device)
        start = time.perf_counter()
        out = model(input_ids=prompts, use_cache=True, logits_to_keep=1)
        first_logits = out.logits[:, -1, :].float()
        token = first_logits.argmax(dim=-1)
        synchronize(device)
        prefill_done = time.perf_counter()
        tokens, cache = [token], getattr(out, key)
        for _ in range(num_new_tokens - 1):
            out = model(input_ids=token[:, None], use_cache=True, **{key: cache})
            cache = getattr(out, key)
            token = out.logits[:, -1, :].argmax(dim=-1)
            tokens.append(token)
        synchronize(device)
        end = time.perf_counter()
    return {
        "tokens": torch.stack(tokens, dim=1).cpu(),
        "first_logits": first_logits.cpu(),
        "prefill_s": prefill_done - start,
        "decode_s": end - prefill_done,
    }


def static_cache(model: Any, prompt_len: int, num_new_tokens: int) -> Any:
    """transformers' StaticCache for prompt_len + num_new_tokens positions: one per job, reset
    per request batch, so a captured graph keeps reading the same cache tensors."""
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=prompt_len + num_new_tokens)


def static_greedy_decode(
    model: Any, prompts, num_new_tokens: int, device: str, cache: Any, decode_step: Any = None
) -> dict[str, Any]:
    """greedy_decode() on a static KV cache (`cache`, from static_cache(), reset here): every
    decode step has the same shapes, so `decode_step` (the model's forward compiled with
    mode="reduce-overhead", decode_step_fn) replays one captured CUDA graph per token. Same
    tokens as greedy_decode."""
    import torch

    from distbench.ranks.dist import synchronize

    decode_step = decode_step or model
    prompts = prompts.to(device)
    prompt_len = prompts.shape[1]
    with torch.inference_mode():  # the cache's tensors were made in inference mode
        cache.reset()
        synchronize(device)
        start = time.perf_counter()
        positions = torch.arange(prompt_len, device=prompts.device)
        out = model(
            input_ids=prompts,
            past_key_values=cache,
            cache_position=positions,
            use_cache=True,
            logits_to_keep=1,
        )
        first_logits = out.logits[:, -1, :].float()
        token = first_logits.argmax(dim=-1)
        synchronize(device)
        prefill_done = time.perf_counter()
        tokens = [token]
        for i in range(num_new_tokens - 1):
            position = positions[-1:] + 1 + i
            out = decode_step(
                input_ids=token[:, None].clone(),
                past_key_values=cache,
                cache_position=position,
                position_ids=position[None, :].expand(token.shape[0], 1),
                use_cache=True,
            )
            token = out.logits[:, -1, :].argmax(dim=-1)
            tokens.append(token)
        synchronize(device)
        end = time.perf_counter()
    return {
        "tokens": torch.stack(tokens, dim=1).cpu(),
        "first_logits": first_logits.cpu(),
        "prefill_s": prefill_done - start,
        "decode_s": end - prefill_done,
    }


def decode_step_fn(model: Any) -> Any:
    """The model's forward compiled with mode="reduce-overhead": torch.compile captures the
    fixed-shape decode step as a CUDA graph and replays it (the first calls compile)."""
    import torch

    return torch.compile(model.forward, mode="reduce-overhead")


class _TensorParallelGroups:
    """DeepSpeed's `mpu` interface over consecutive-rank TP groups [r·tp, (r+1)·tp): the
    inference engine otherwise makes one group of ranks 0..tp−1 whatever the world size."""

    def __init__(self, tp: int) -> None:
        import torch.distributed as dist

        world, rank = dist.get_world_size(), dist.get_rank()
        self.tp, self.rank = tp, rank
        self.tp_group = self.dp_group = None
        for first in range(0, world, tp):  # every rank must create every group
            group = dist.new_group(list(range(first, first + tp)))
            if first <= rank < first + tp:
                self.tp_group = group
        for offset in range(tp):
            group = dist.new_group(list(range(offset, world, tp)))
            if rank % tp == offset:
                self.dp_group = group

    def get_model_parallel_group(self):
        return self.tp_group

    def get_model_parallel_rank(self) -> int:
        return self.rank % self.tp

    def get_model_parallel_world_size(self) -> int:
        return self.tp

    def get_data_parallel_group(self):
        return self.dp_group

    def get_data_parallel_rank(self) -> int:
        return self.rank // self.tp

    def get_data_parallel_world_size(self) -> int:
        import torch.distributed as dist

        return dist.get_world_size() // self.tp


def tensor_parallel(model: Any, layout: Layout, dtype: str) -> Any:
    """The model split over its TP group by DeepSpeed AutoTP (init_inference); returns the
    module whose Linear layers are now sharded (forwards go to it directly)."""
    import deepspeed

    from distbench.workloads.timing import torch_dtype

    if layout.tp < layout.world_size:
        # DeepSpeed's CPU shared-memory all-reduce sums over every rank of the node, ignoring
        # the group it is given: with several TP groups on a node it would mix replicas. Level
        # 0 makes inference_all_reduce fall back to the process group's all_reduce.
        sys.modules["deepspeed.comm.comm"].cdb.shm_vector_kernel_level = 0
    groups = _TensorParallelGroups(layout.tp)
    # Both keys: `mpu` stops the engine from making its own group of ranks 0..tp-1, and AutoTP
    # shards with `tp_group` (with mpu alone it gets no group, shards nothing and skips the
    # all-reduces: every rank would silently run the whole model).
    engine = deepspeed.init_inference(
        model,
        tensor_parallel={"tp_size": layout.tp, "tp_group": groups.tp_group, "mpu": groups},
        dtype=torch_dtype(dtype),
        replace_with_kernel_inject=False,
    )
    return engine.module


def run(job: Job, run_dir: Path) -> dict[str, Any]:
    """Warm-up + timed request batches; returns this rank's figures (s, bytes, token ids)."""
    import torch.distributed as dist

    from distbench.ranks import dist as dist_utils
    from distbench.ranks import faults
    from distbench.ranks.models import build_model
    from distbench.workloads.timing import Progress

    layout, device = job.layout, job.device
    rank = dist.get_rank()
    dp_rank, tp_rank = rank // layout.tp, rank % layout.tp
    prompt_len, batch_size = inference_sizes(job.options, job.batch)
    num_new = job.options.num_new_tokens
    model = build_model(job.model, job.workload.dtype, job.workload.seed, job.device).eval()
    options = job.options
    if layout.tp > 1:
        model = tensor_parallel(model, layout, job.workload.dtype)
    model = model.to(device)
    decode_step = decode_step_fn(model) if options.cuda_graph else None
    cache = static_cache(model, prompt_len, num_new) if options.cuda_graph else None
    dist_utils.heartbeat(run_dir, rank, -1)  # model built (TP: split; may compile a DS op)
    dist_utils.synchronize(device)
    init_mem_bytes = dist_utils.current_memory_bytes(device)
    dist_utils.reset_peak_memory(device)

    num_warmup, num_timed = job.workload.num_warmup_steps, job.workload.num_steps
    progress = Progress(run_dir, rank, num_warmup + num_timed)
    prefill_s, decode_s, generated = [], [], 0
    first: dict[str, Any] = {}
    for step in range(num_warmup + num_timed):
        prompts = prompt_batch(
            job.workload.seed, step, layout.dp * batch_size, prompt_len, job.model.vocab_size
        )
        dist_utils.heartbeat(run_dir, rank, step)
        faults.inject(job.fault, rank, step)
        dist.barrier()
        rows = replica_rows(prompts, dp_rank, batch_size)
        if options.cuda_graph:
            out = static_greedy_decode(model, rows, num_new, device, cache, decode_step)
        else:
            out = greedy_decode(model, rows, num_new, device)
        prefill_s.append(out["prefill_s"])
        decode_s.append(out["decode_s"])
        if step >= num_warmup:
            generated += out["tokens"].numel()
        if step == 0:
            top = out["first_logits"].topk(TOP_K_LOGITS, dim=-1)
            first = {
                "tokens": out["tokens"].tolist(),
                "top_logits": top.values.tolist(),
                "top_logit_ids": top.indices.tolist(),
            }
        progress.point("warmup" if step < num_warmup else "timed", prefill_s[-1] + decode_s[-1])
    progress.close()
    return {
        "rank": rank,
        "dp_rank": dp_rank,
        "tp_rank": tp_rank,
        "prefill_times_s": prefill_s,
        "decode_times_s": decode_s,
        "num_generated_tokens": generated,
        "first_step": first,
        "init_mem_bytes": init_mem_bytes,
        "peak_mem_bytes": dist_utils.peak_memory_bytes(device),
        "num_params_local": sum(p.numel() for p in model.parameters()),
    }


def combine(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Per request batch, the slowest rank's prefill, decode and whole latency; tokens counted
    once per replica (its TP rank 0); step 0's tokens and top logits per replica."""
    steps = range(len(per_rank[0]["prefill_times_s"]))
    leaders = [r for r in per_rank if r["tp_rank"] == 0]
    return {
        "prefill_times_s": [max(r["prefill_times_s"][i] for r in per_rank) for i in steps],
        "decode_times_s": [max(r["decode_times_s"][i] for r in per_rank) for i in steps],
        "latency_times_s": [
            max(r["prefill_times_s"][i] + r["decode_times_s"][i] for r in per_rank) for i in steps
        ],
        "num_generated_tokens": sum(r["num_generated_tokens"] for r in leaders),
        "first_step": {r["dp_rank"]: r["first_step"] for r in leaders},
        "ranks": [
            {k: v for k, v in r.items() if k not in ("first_step", "num_generated_tokens")}
            for r in per_rank
        ],
    }


def measure(job: Job, result: dict[str, Any], job_dir: Path | None = None) -> Measured:
    """result.json → the inference metrics (workloads/inference/metrics.py; names carry units)."""
    num_warmup = result["num_warmup_steps"]
    model, hw, dtype, layout = job.model, job.hardware, job.dtype, job.layout
    prompt_len, batch_size = inference_sizes(job.options, job.batch)
    params = count_params(model)
    ranks = result["ranks"]
    decode_times_s = result["decode_times_s"][num_warmup:]
    # what both the compute figures and the bandwidth figures of the decode steps depend on
    shape = dict(
        decode_times_s=decode_times_s,
        num_matmul_params=params["matmul"],
        num_layers=model.num_layers,
        prompt_len=prompt_len,
        num_new_tokens=job.options.num_new_tokens,
        batch_size=batch_size,
        dp=layout.dp,
        world_size=layout.world_size,
        dtype=dtype,
    )
    metrics = inference_metrics(
        **shape,
        prefill_times_s=result["prefill_times_s"][num_warmup:],
        latency_times_s=result["latency_times_s"][num_warmup:],
        num_generated_tokens=result["num_generated_tokens"],
        peak_mem_bytes_per_rank=[r["peak_mem_bytes"] for r in ranks],
        lm_head_params=model.vocab_size * model.hidden_size,
        hidden=model.hidden_size,
        peak_tflops_per_device=getattr(hw, f"peak_tflops_{dtype}"),
        price_usd_per_device_hour=hw.price_usd_per_hour,
    )
    metrics.update(  # MBU beside MFU: the decode steps' bytes over the device's bandwidth
        decode_bandwidth_metrics(
            **shape,
            kv_dim=model.num_kv_heads * (model.hidden_size // model.num_heads),
            mem_bandwidth_gbps=hw.mem_bandwidth_gbps,
        )
    )
    metrics["init_mem_gib"] = max(r["init_mem_bytes"] for r in ranks) / GIB
    metrics["num_params"] = float(params["total"])
    metrics["batch_size_per_replica"] = float(batch_size)
    metrics["prompt_len"] = float(prompt_len)
    series = [("latency_s", t, i) for i, t in enumerate(result["latency_times_s"])]
    series += [("time_to_first_token_s", t, i) for i, t in enumerate(result["prefill_times_s"])]
    decode = "cuda_graph" if job.options.cuda_graph else "eager"
    return Measured(metrics=metrics, series=series, tags={"decode": decode})
