"""workload=inference's formulas against values computed by hand, and the FLOPs formula
against torch's FlopCounterMode on a real prefill and decode step (eager attention, whose
matmuls the counter sees; it counts matmuls only, so RMSNorm weights are left out of N).

    pytest tests/unit/test_inference_metrics.py -m unit
"""

from __future__ import annotations

import pytest

from distbench.workloads.inference import metrics as im

pytestmark = pytest.mark.unit

# N = 1000 matmul parameters of which the LM head is 200, L = 2 layers, d = 8, P = 4 tokens
N, HEAD, L, D, P = 1000, 200, 2, 8, 4


def test_prefill_flops_by_hand():
    # P·(2·(N − head) + 4·L·d·P) + 2·head = 4·(1600 + 256) + 400
    assert im.prefill_flops(N, HEAD, L, D, P) == 7824


def test_decode_flops_by_hand():
    # n = 3: steps j = 1, 2 attend to 5 and 6 keys: (2000 + 64·5) + (2000 + 64·6)
    assert im.decode_flops(N, L, D, P, 3) == 2320 + 2384
    assert im.decode_flops(N, L, D, P, 1) == 0  # no decode step after the prefill token


def test_decode_arithmetic_intensity_by_hand():
    # B = 2, fp32: 2·(2N + 4·L·d·(P + n/2)) / (4·N) = 2·(2000 + 64·5.5) / 4000
    assert im.decode_arithmetic_intensity(N, L, D, P, 3, 2, 4) == pytest.approx(1.176)
    # weights are shared by the batch: intensity grows with B, halves with the bytes
    assert im.decode_arithmetic_intensity(N, L, D, P, 3, 4, 2) == pytest.approx(4 * 1.176)


def test_cost_and_rate_by_hand():
    # 2 devices × $0.09/h × 100 s / 3600 = $0.005 for 1000 tokens → $5 per 1M
    assert im.cost_usd_per_1m_tokens(2, 0.09, 100.0, 1000) == pytest.approx(5.0)
    assert im.tokens_per_s(36, 4.5) == 8.0
    with pytest.raises(ValueError):
        im.tokens_per_s(1, 0.0)


def test_inference_metrics_by_hand():
    m = im.inference_metrics(
        prefill_times_s=[0.1, 0.2, 0.3],
        decode_times_s=[1.0, 1.0, 2.0],
        latency_times_s=[1.1, 1.2, 2.3],
        num_generated_tokens=36,  # dp 2 × B 2 × n 3 × 3 steps
        peak_mem_bytes_per_rank=[2**30, 2**31],
        num_matmul_params=N,
        lm_head_params=HEAD,
        num_layers=L,
        hidden=D,
        prompt_len=P,
        num_new_tokens=3,
        batch_size=2,
        dp=2,
        world_size=2,
        dtype="fp32",
        peak_tflops_per_device=None,
        price_usd_per_device_hour=0.09,
    )
    assert m["time_to_first_token_s"] == pytest.approx(0.2)
    assert m["time_per_output_token_s"] == pytest.approx(0.5)  # p50 decode 1.0 s / 2 steps
    assert m["latency_s_p50"] == pytest.approx(1.2)
    assert m["latency_s_p90"] == pytest.approx(1.2 + 0.8 * 1.1)  # rank 1.8 of [1.1, 1.2, 2.3]
    assert m["decode_tokens_per_s"] == pytest.approx(4 * 2 * 3 / 4.0)  # rows·(n−1)·steps / Σ
    assert m["output_tokens_per_s"] == pytest.approx(36 / 4.6)
    assert m["throughput_tokens_per_s"] == pytest.approx(4 * (4 + 3) * 3 / 4.6)
    assert m["model_flops_per_step"] == 4 * (7824 + 4704)
    assert m["tflops_total"] == pytest.approx(4 * 12528 * 3 / 4.6 / 1e12)
    assert m["tflops_per_device"] == pytest.approx(m["tflops_total"] / 2)
    assert m["cost_usd_per_1m_tokens"] == pytest.approx(2 * 0.09 * 4.6 / 3600 / 36 * 1e6)
    assert m["peak_mem_gib"] == 2.0 and m["peak_mem_gib_rank0"] == 1.0
    assert m["tokens_generated_per_step"] == 12 and m["tokens_prompt_per_step"] == 16
    assert m["num_timed_steps"] == 3 and "mfu_pct" not in m
    with_peak = im.inference_metrics(**{**_ARGS, "peak_tflops_per_device": 1e-9})
    assert with_peak["mfu_pct"] == pytest.approx(100 * with_peak["tflops_per_device"] / 1e-9)


_ARGS = dict(
    prefill_times_s=[0.1],
    decode_times_s=[1.0],
    latency_times_s=[1.1],
    num_generated_tokens=3,
    peak_mem_bytes_per_rank=[1],
    num_matmul_params=N,
    lm_head_params=HEAD,
    num_layers=L,
    hidden=D,
    prompt_len=P,
    num_new_tokens=3,
    batch_size=1,
    dp=1,
    world_size=1,
    dtype="bf16",
    price_usd_per_device_hour=1.0,
)


def test_flops_formula_equals_flop_counter_on_a_real_prefill_and_decode_step():
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from distbench.ranks.models import build_model, count_params
    from tests.conftest import compose_config

    overrides = ["model.hidden_size=64", "model.num_layers=2", "model.vocab_size=512"]
    overrides += ["model.intermediate_size=128", "model.attn_implementation=eager"]
    cfg = compose_config(overrides)
    model = build_model(cfg.model, "fp32", 0).eval()
    h, layers, vocab = 64, 2, 512
    norms = layers * 2 * h + h  # RMSNorm weights: in count_params' matmul N, not matmuls
    n_mm = count_params(cfg.model)["matmul"] - norms
    batch, prompt_len = 3, 10
    prompts = torch.randint(0, vocab, (batch, prompt_len))
    mask = torch.ones_like(prompts)
    with torch.inference_mode():
        with FlopCounterMode(display=False) as prefill:
            out = model(input_ids=prompts, attention_mask=mask, use_cache=True, logits_to_keep=1)
        token = out.logits[:, -1].argmax(-1)[:, None]
        mask = torch.cat([mask, mask.new_ones((batch, 1))], dim=1)
        with FlopCounterMode(display=False) as decode:
            model(input_ids=token, attention_mask=mask, past_key_values=out.past_key_values)
    assert prefill.get_total_flops() == batch * im.prefill_flops(
        n_mm, vocab * h, layers, h, prompt_len
    )
    assert decode.get_total_flops() == batch * im.decode_flops(n_mm, layers, h, prompt_len, 2)
