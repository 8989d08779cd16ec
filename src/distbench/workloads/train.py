"""The train workload: a model wrapped by its strategy, warm-up steps, then timed steps.

Every strategy sees the same data: step s's global batch is drawn from (seed, s) and each
data-parallel replica takes its slice, so layouts differ only in how they compute. Each step is
bracketed by a barrier and a device sync; its time is the slowest rank's. Rank 0 appends one
line per step to progress.jsonl for the orchestrator's progress bar.

    python -m torch.distributed.run --nproc_per_node=2 -m distbench.worker RUN_DIR
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from distbench.config import Layout


def global_batch(
    seed: int, step: int, grad_accum_steps: int, num_rows: int, seq_len: int, vocab_size: int
):
    """Token ids [grad_accum_steps, num_rows, seq_len] of one step, fixed by (seed, step)."""
    import torch

    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, vocab_size, (grad_accum_steps, num_rows, seq_len), generator=generator)


def rank_micro_batches(tokens, dp_rank: int, micro_batch_size: int) -> list:
    """This replica's micro-batches of a global batch: rows [dp_rank*mbs, (dp_rank+1)*mbs)."""
    rows = slice(dp_rank * micro_batch_size, (dp_rank + 1) * micro_batch_size)
    return [tokens[g, rows].contiguous() for g in range(tokens.shape[0])]


def _train_step(wrapped: Any, micro_batches: list, device: str) -> float:
    """One optimizer step; returns the mean loss over its micro-batches."""
    engine = wrapped.engine
    batches = [mb.to(device) for mb in micro_batches]
    if wrapped.is_pipeline:
        return float(engine.train_batch(data_iter=iter([(mb, mb) for mb in batches])))
    losses = []
    for mb in batches:
        loss = engine(input_ids=mb, labels=mb).loss
        engine.backward(loss)
        engine.step()
        losses.append(loss.detach())
    return float(sum(losses) / len(losses))


def run(cfg: Any, layout: Layout, run_dir: Path, device: str) -> dict[str, Any]:
    """Warm-up + timed steps; returns this rank's figures (times in s, memory in bytes)."""
    import torch.distributed as dist

    from distbench import dist as dist_utils
    from distbench.models import build_model
    from distbench.strategies.deepspeed import initialize

    rank = dist.get_rank()
    model = build_model(cfg.model, cfg.workload.dtype, cfg.workload.seed)
    if device == "cuda":
        model = model.cuda()
    wrapped = initialize(model, cfg, layout)
    dist_utils.synchronize(device)
    init_mem_bytes = dist_utils.current_memory_bytes(device)
    dist_utils.reset_peak_memory(device)

    num_warmup, num_timed = cfg.workload.num_warmup_steps, cfg.workload.num_steps
    progress = (run_dir / "progress.jsonl").open("a") if rank == 0 else None
    step_times_s, losses = [], []
    for step in range(num_warmup + num_timed):
        tokens = global_batch(
            cfg.workload.seed,
            step,
            cfg.batch.grad_accum_steps,
            layout.dp * cfg.batch.micro_batch_size,
            cfg.batch.seq_len,
            cfg.model.vocab_size,
        )
        micro_batches = rank_micro_batches(tokens, wrapped.dp_rank, cfg.batch.micro_batch_size)
        dist.barrier()
        dist_utils.synchronize(device)
        start = time.perf_counter()
        loss = _train_step(wrapped, micro_batches, device)
        dist_utils.synchronize(device)
        step_times_s.append(time.perf_counter() - start)
        losses.append(loss)
        if progress:
            phase = "warmup" if step < num_warmup else "timed"
            line = {
                "phase": phase,
                "step": step + 1,
                "num_steps": num_warmup + num_timed,
                "step_time_s": step_times_s[-1],
                "loss": loss,
            }
            progress.write(json.dumps(line) + "\n")
            progress.flush()
    if progress:
        progress.close()
    return {
        "rank": rank,
        "dp_rank": wrapped.dp_rank,
        "step_times_s": step_times_s,
        "losses": losses,
        "init_mem_bytes": init_mem_bytes,
        "peak_mem_bytes": dist_utils.peak_memory_bytes(device),
        "num_params_local": sum(p.numel() for p in wrapped.engine.module.parameters()),
    }
