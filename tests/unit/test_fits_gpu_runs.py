"""Fits means fits: `distbench plan`'s verdict and predicted peak against every GPU job measured
so far (benchmarks/gpu_runs/README.md, ../shared/gpu/README.md), and the headroom a fit keeps.

Each row is a config as run (world_size 1, bf16), the device it ran on, and what it measured:
its peak (CUDA max allocated, GiB) or OOM. The plan must say "fits" for every job that ran,
within 15 % of its peak, and "does not fit" for every job that ran out of memory.
"""

from __future__ import annotations

import pytest

from distbench.figures.memory import (
    CUDA_CONTEXT_GIB,
    FITS_HEADROOM_FRACTION,
    Memory,
    fits_device,
    gpu_headroom_bytes,
)
from distbench.figures.metrics import GIB
from distbench.figures.predict import Prediction, predict
from distbench.job import resolve_job
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

OOM = None  # the job ran out of memory
LLAMA_1B = ["model=llama_1b", "batch=medium"]
B8S1024 = [*LLAMA_1B, "batch.micro_batch_size=8", "batch.seq_len=1024"]
LLAMA_8B = ["model=llama3_8b", "batch=small"]
GPT2 = ["model=gpt2_124m", "batch=medium"]
# the bare script's shape: llama_1b, one micro-batch of 1 × 8192 tokens, fp32 weights + bf16
# autocast + fused AdamW: the recipe strategy=single runs
BARE_8K = [
    "model=llama_1b",
    "batch.micro_batch_size=1",
    "batch.grad_accum_steps=1",
    "batch.seq_len=8192",
]

# (what ran, the device it ran on, measured peak GiB or OOM); bf16-mixed unless `pure`.
GPU_JOBS = [
    # 2026-11-25 H100 gpu_check; 2026-11-26 H100 and H200: the same peaks on both
    ([*LLAMA_1B, "strategy=single"], "h100_sxm", 27.70),
    ([*LLAMA_1B, "strategy=ddp"], "h100_sxm", 27.70),
    ([*LLAMA_1B, "strategy=fsdp"], "h100_sxm", 27.70),  # unwrapped at world size 1
    ([*LLAMA_1B, "strategy=dp"], "h100_sxm", 24.76),
    ([*LLAMA_1B, "strategy=zero3"], "h100_sxm", 24.78),
    ([*LLAMA_1B, "strategy=single", "workload.precision=pure"], "h100_sxm", 15.56),  # 11-23
    ([*B8S1024, "strategy=single"], "h100_sxm", 48.4),
    ([*B8S1024, "strategy=dp"], "h100_sxm", 43.6),
    ([*B8S1024, "strategy=zero3"], "h100_sxm", 43.6),
    ([*LLAMA_8B, "strategy=single", "workload.precision=pure"], "h100_sxm", 62.5),
    ([*GPT2, "strategy=single"], "h200", 4.88),
    ([*GPT2, "strategy=zero3"], "h200", 4.15),
    # 2026-11-26 H200: both ran out of memory at 134 GiB allocated of 139.8
    ([*LLAMA_8B, "strategy=single"], "h200", OOM),
    ([*LLAMA_8B, "strategy=fsdp"], "h200", OOM),
    # 2026-11-26 H200, the bare script (../shared/gpu/README.md)
    ([*BARE_8K, "strategy=single"], "h200", 43.84),
    ([*BARE_8K, "strategy=single", "activation_checkpointing=full"], "h200", 27.27),
]


def _plan(overrides: list[str], hardware: str, world_size: int = 1) -> Prediction:
    """The prediction `distbench plan` makes for the job (bf16; the suite's time source)."""
    base = [f"world_size={world_size}", "workload.dtype=bf16", f"hardware={hardware}"]
    return predict(resolve_job(compose_config([*base, *overrides]), CONF_DIR))


@pytest.mark.parametrize(
    "overrides,hardware,measured_gib",
    GPU_JOBS,
    ids=[" ".join(o[1:] if o[0].startswith("model") else o) for o, _, _ in GPU_JOBS],
)
def test_the_plan_agrees_with_every_gpu_job(overrides, hardware, measured_gib):
    p = _plan(overrides, hardware)
    predicted = p.mem.total / GIB
    if measured_gib is OOM:
        assert p.fits is False, f"ran out of memory, planned to fit at {predicted:.1f} GiB"
        return
    assert p.fits is True, f"ran at {measured_gib} GiB, planned not to fit ({predicted:.1f})"
    assert predicted == pytest.approx(measured_gib, rel=0.15)


def test_fsdp_at_world_size_1_is_planned_as_the_single_device_it_runs_as():
    # the torch engine wraps nothing at dp = 1: autocast's bf16 copies are there (llama3_8b:
    # 15 GiB the old plan left out, saying "fits" at 122.4 GiB for a job that OOMed)
    single = _plan([*LLAMA_8B, "strategy=single"], "h200")
    fsdp = _plan([*LLAMA_8B, "strategy=fsdp"], "h200")
    assert fsdp.mem.total == pytest.approx(single.mem.total)
    assert fsdp.mem.terms["autocast_weight_copies_bf16"] == pytest.approx(2 * fsdp.num_params)
    # sharded over 2 ranks FSDP2 casts by its policy: no autocast copies, gathered layers
    two = _plan([*LLAMA_8B, "strategy=fsdp"], "h200", world_size=2)
    assert "autocast_weight_copies_bf16" not in two.mem.terms
    assert "fsdp_gathered_params" in two.mem.terms


def test_a_fit_keeps_the_cuda_context_and_a_share_of_the_device_free():
    device = 140.4 * GIB  # the H200's catalog memory
    headroom = gpu_headroom_bytes(device)
    assert headroom == pytest.approx(CUDA_CONTEXT_GIB * GIB + FITS_HEADROOM_FRACTION * device)
    at_limit = Memory(params=device - headroom, grads=0, optimizer=0, activations=0)
    over = Memory(params=device - headroom + 1, grads=0, optimizer=0, activations=0)
    assert fits_device(at_limit, device) is True and fits_device(over, device) is False
    # the H200 run that OOMed had 134 GiB allocated: a peak that size is refused
    oomed = Memory(params=134 * GIB, grads=0, optimizer=0, activations=0)
    assert fits_device(oomed, device) is False
    assert fits_device(Memory(params=1, grads=0, optimizer=0, activations=0), None) is None
    # a CPU rank (a runtime term) fits its share of host memory as it is
    cpu = Memory(params=device - 1, grads=0, optimizer=0, activations=0, runtime=1)
    assert fits_device(cpu, device) is True


def test_gradients_are_not_there_at_the_peak_of_a_one_micro_batch_step():
    # torch frees gradients after each step (set_to_none): with one micro-batch the loss's
    # backward peaks before any exists; with two, the first micro-batch's are held
    one = _plan([*BARE_8K, "strategy=single"], "h200")
    two = _plan([*BARE_8K, "strategy=single", "batch.grad_accum_steps=2"], "h200")
    assert one.mem.grads_transient == one.mem.grads > 0
    assert two.mem.grads_transient == 0
    assert two.mem.total - one.mem.total == pytest.approx(one.mem.grads)
    # DeepSpeed keeps its gradient buffers
    assert _plan([*BARE_8K, "strategy=dp"], "h200").mem.grads_transient == 0
