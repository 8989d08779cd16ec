"""Is a strategy computing the same model? Its first-step loss against the single-device
reference on the same weights (seed, drawn as ranks/models.py draws them on the job's device
type), global batch, dtype and precision recipe.

The reference is one forward pass of the unsplit model over step 0's whole global batch (every
replica's rows, every micro-batch): the first step's loss is computed before any update, so
no training is needed. It runs in a subprocess (the orchestrator does not import torch) and is
cached per model, batch, dtype, seed and number of rows, so a sweep computes it once (in
reference_losses.json of the probes' cache folder, $DISTBENCH_CACHE_DIR; a damaged file or entry
is computed again and rewritten). A first-step loss that is not finite is never "equivalent".

    python -m distbench.workloads.train.equivalence JOB_DIR      # prints {"loss_first_single": ...}
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

from distbench.job import Job
from distbench.launch.lifeline import die_with_parent
from distbench.probes import cache
from distbench.ranks.models import INIT_SCHEME

CACHE_FILE = "reference_losses.json"  # {reference_key: loss} in cache.cache_dir()
# Relative tolerance on the first-step loss. fp32: sharded reductions add in another order;
# seen here ≤ 1e-6, so 1e-4 leaves room and still catches a wrong split (≥ 1e-3). bf16 keeps
# 8 mantissa bits (≈ 4e-3 per rounding) and rounds after every op: 2e-2.
TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 1e-2}
MAX_REFERENCE_PARAMS = 500_000_000  # above this a single-device reference is not computed


def rel_err(value: float, reference: float) -> float:
    """|value − reference| / |reference|."""
    return abs(value - reference) / abs(reference)


def reference_key(job: Job) -> str:
    """What the reference depends on: model, batch, dtype, seed, and the global batch's rows."""
    batch = job.batch
    parts = {
        "model": dataclasses.asdict(job.model),
        "rows": job.layout.dp * batch.micro_batch_size,
        "grad_accum_steps": batch.grad_accum_steps,
        "seq_len": batch.seq_len,
        "dtype": job.dtype,
        "precision": job.precision,
        "seed": job.workload.seed,
        "init": INIT_SCHEME,
        "device_type": job.device,  # the weights are drawn by the device type's generator
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def compute_reference(job: Job) -> float:
    """The unsplit model's mean loss over step 0's micro-batches (runs torch: subprocess only)."""
    import torch

    from distbench.precision import is_mixed
    from distbench.ranks.models import DTYPE_NAMES, build_model
    from distbench.workloads.train.workload import global_batch

    torch.set_num_threads(1)
    model = build_model(job.model, job.weights_dtype, job.workload.seed, job.device)
    autocast = contextlib.nullcontext()
    if is_mixed(job.dtype, getattr(job.workload, "precision", "pure")):  # as the engines run it
        dtype = getattr(torch, DTYPE_NAMES[job.dtype])
        autocast = torch.autocast(device_type=job.device, dtype=dtype)
    tokens = global_batch(
        job.workload.seed,
        0,
        job.batch.grad_accum_steps,
        job.layout.dp * job.batch.micro_batch_size,
        job.batch.seq_len,
        job.model.vocab_size,
    )
    with torch.no_grad(), autocast:
        losses = [
            model(input_ids=mb.to(job.device), labels=mb.to(job.device)).loss.float().item()
            for mb in tokens
        ]
    return sum(losses) / len(losses)


def is_reference(entry: object) -> bool:
    """Whether a cache entry is a reference loss: a finite number (else it is computed again)."""
    return isinstance(entry, int | float) and not isinstance(entry, bool) and math.isfinite(entry)


def reference_loss(job: Job, job_dir: Path, timeout_s: float = 600) -> float:
    """The cached reference, or computed now in a subprocess (from job_dir's resolved.yaml,
    which holds `job`) and cached."""
    key = reference_key(job)
    reference = cache.cached_entry(CACHE_FILE, key, is_reference)
    if reference is None:  # none yet, or a damaged file or entry: computed again, rewritten
        out = subprocess.run(
            [sys.executable, "-m", "distbench.workloads.train.equivalence", str(job_dir)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
            preexec_fn=die_with_parent(),  # dies with the orchestrator, even SIGKILLed
        ).stdout
        reference = json.loads(out.strip().splitlines()[-1])["loss_first_single"]
        cache.store(CACHE_FILE, key, reference)
    return float(reference)


def check(
    job: Job, loss_first: float, num_params: float, job_dir: Path
) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, tags) of the equivalence check: loss_first_single, loss_rel_err_vs_single;
    tags equivalent=true|false|unchecked and equivalence_tolerance (or why unchecked)."""
    if num_params > MAX_REFERENCE_PARAMS:
        return {}, {
            "equivalent": "unchecked",
            "equivalence_note": f"{num_params:.3g} params > {MAX_REFERENCE_PARAMS:.3g}: "
            "no single-device reference",
        }
    if not math.isfinite(loss_first):  # a diverged first step matches nothing
        return {}, {"equivalent": "false", "equivalence_note": f"first-step loss {loss_first}"}
    reference = reference_loss(job, job_dir)
    err = rel_err(loss_first, reference)
    tolerance = TOLERANCE[job.dtype]
    metrics = {"loss_first_single": reference, "loss_rel_err_vs_single": err}
    tags = {"equivalent": str(err <= tolerance).lower(), "equivalence_tolerance": f"{tolerance:g}"}
    return metrics, tags


if __name__ == "__main__":
    print(json.dumps({"loss_first_single": compute_reference(Job.load(Path(sys.argv[1])))}))
