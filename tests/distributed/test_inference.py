"""workload=inference for real on 2 gloo ranks: data-parallel replicas and DeepSpeed AutoTP
both finish, and their greedy tokens equal a single-device greedy decode of the same prompts
(TP also its first-step top logits, to round-off); the metrics count what the ranks generated.
Both jobs are the session's shared inference sweep (tests/e2e/shared_sweeps.py), read from their
job dirs.

    pytest tests/distributed/test_inference.py -m distributed
"""

from __future__ import annotations

import pytest
import torch

from distbench.job import resolve_job
from tests.conftest import CONF_DIR, compose_config
from tests.e2e.shared_sweeps import INFERENCE

pytestmark = pytest.mark.distributed

BATCH, PROMPT = INFERENCE["batch_size"], INFERENCE["prompt_len"]
NEW, STEPS = INFERENCE["num_new_tokens"], INFERENCE["num_steps"]
FAST = [
    "tracking=none",
    "workload=inference",
    "workload.num_warmup_steps=1",
    f"workload.num_steps={STEPS}",
    f"inference.batch_size={BATCH}",
    f"inference.prompt_len={PROMPT}",
    f"inference.num_new_tokens={NEW}",
    "world_size=2",
]


def single_device_decode(cfg, num_rows: int) -> dict:
    """Step 0's prompts decoded greedily by the whole model on this process's CPU."""
    from distbench.ranks.models import build_model
    from distbench.workloads.inference.workload import greedy_decode, prompt_batch

    model = build_model(cfg.model, cfg.workload.dtype, cfg.workload.seed).eval()
    prompts = prompt_batch(cfg.workload.seed, 0, num_rows, PROMPT, cfg.model.vocab_size)
    return greedy_decode(model, prompts, NEW, "cpu")


def job(sweep, strategy: str):
    """The shared sweep's job: its config (composed as it was), metrics and result.json."""
    cfg = compose_config([*FAST, f"strategy={strategy}"])
    outcome = sweep.outcome(strategy)
    assert outcome["status"] == "FINISHED", outcome.get("failure_reason")
    assert outcome["decode"] == "eager"  # tagged: inference.cuda_graph=true is "cuda_graph"
    return cfg, outcome["metrics"], sweep.result(strategy)


def check_metrics(metrics: dict, dp: int) -> None:
    generated = BATCH * NEW * dp  # per request batch, whole job
    assert metrics["tokens_generated_per_step"] == generated
    assert metrics["num_generated_tokens"] == generated * STEPS  # counted by the ranks
    assert metrics["tokens_prompt_per_step"] == BATCH * PROMPT * dp
    for name in (
        "time_to_first_token_s",
        "time_per_output_token_s",
        "latency_s_p50",
        "decode_tokens_per_s",
        "throughput_tokens_per_s",
        "tflops_total",
        "arithmetic_intensity_flops_per_byte",
        "cost_usd_per_1m_tokens",
        "peak_mem_gib_rank0",
        "peak_mem_gib_rank1",
    ):
        assert metrics[name] > 0, name
    assert metrics["latency_s_p90"] >= metrics["latency_s_p50"] > metrics["time_to_first_token_s"]
    assert metrics["tflops_per_device"] == pytest.approx(metrics["tflops_total"] / 2)
    # same seconds, prompt + generated vs generated tokens
    ratio = metrics["throughput_tokens_per_s"] / metrics["output_tokens_per_s"]
    assert ratio == pytest.approx((PROMPT + NEW) / NEW)
    assert metrics["peak_mem_gib"] == max(
        metrics["peak_mem_gib_rank0"], metrics["peak_mem_gib_rank1"]
    )


def test_data_parallel_replicas_decode_their_own_rows(inference_sweep):
    cfg, metrics, result = job(inference_sweep, "dp")
    assert resolve_job(cfg, CONF_DIR).layout.dp == 2
    check_metrics(metrics, dp=2)
    reference = single_device_decode(cfg, num_rows=2 * BATCH)["tokens"].tolist()
    assert sorted(result["first_step"]) == ["0", "1"]
    assert result["first_step"]["0"]["tokens"] == reference[:BATCH]
    assert result["first_step"]["1"]["tokens"] == reference[BATCH:]


def test_tensor_parallel_equals_single_device_greedy_decode(inference_sweep):
    cfg, metrics, result = job(inference_sweep, "tp")
    assert resolve_job(cfg, CONF_DIR).layout.tp == 2
    check_metrics(metrics, dp=1)
    assert [r["tp_rank"] for r in result["ranks"]] == [0, 1]
    # each rank holds half of every split projection (embeddings and norms stay whole)
    assert result["ranks"][0]["num_params_local"] < metrics["num_params"]
    reference = single_device_decode(cfg, num_rows=BATCH)
    (first,) = result["first_step"].values()
    assert first["tokens"] == reference["tokens"].tolist()
    # the prefill's top logits, at the ids TP ranked first: equal to fp32 round-off (the
    # all-reduce sums the halves in another order), far below the gaps between them
    want = reference["first_logits"].gather(1, torch.tensor(first["top_logit_ids"]))
    assert (torch.tensor(first["top_logits"]) - want).abs().max().item() < 1e-4


def test_a_static_kv_cache_decodes_the_same_tokens_request_after_request():
    """inference.cuda_graph's decode (one StaticCache per job, reset per request batch), run
    eagerly here: the same tokens and prefill logits as the dynamic-cache decode."""
    from distbench.ranks.models import build_model
    from distbench.workloads.inference.workload import (
        greedy_decode,
        prompt_batch,
        static_cache,
        static_greedy_decode,
    )

    cfg = compose_config(FAST)
    model = build_model(cfg.model, cfg.workload.dtype, cfg.workload.seed).eval()
    cache = static_cache(model, PROMPT, NEW)
    for step in range(2):
        prompts = prompt_batch(cfg.workload.seed, step, BATCH, PROMPT, cfg.model.vocab_size)
        dynamic = greedy_decode(model, prompts, NEW, "cpu")
        static = static_greedy_decode(model, prompts, NEW, "cpu", cache)
        assert static["tokens"].tolist() == dynamic["tokens"].tolist()
        assert torch.allclose(static["first_logits"], dynamic["first_logits"], atol=1e-5)
