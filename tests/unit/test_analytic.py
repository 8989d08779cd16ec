"""The planner's model (figures/) against hand-computed cases: the ZeRO paper's and the
course's memory table, Korthikanti's activations, ring collectives, the pipeline bubble, and
predict/recommend on composed configs."""

from __future__ import annotations

import dataclasses
import json

import pytest

from distbench.compose.schema import HardwareConfig
from distbench.figures import cpu_rss, step_time
from distbench.figures.activations import activation_bytes_per_layer, logits_bytes
from distbench.figures.communication import dp_comm_bytes, pp_comm_bytes, tp_comm_bytes
from distbench.figures.job_terms import zero_equivalent_stage
from distbench.figures.memory import Memory
from distbench.figures.metrics import GIB
from distbench.figures.model_states import state_bytes_per_param, zero_model_states_bytes
from distbench.figures.params import param_split
from distbench.figures.predict import Prediction, pred_vs_measured, predict
from distbench.figures.recommend import recommend
from distbench.figures.step_time import pipeline_bubble_fraction
from distbench.job import Job, Layout, resolve_job
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

H100 = HardwareConfig(
    name="h100_sxm",
    device="cuda",
    peak_tflops_fp32=67.0,
    peak_tflops_bf16=989.0,
    mem_gib=79.6,
    interconnect_gbps=900.0,
    price_usd_per_hour=6.88,
)


def _total_gb(stage: int) -> float:
    return sum(zero_model_states_bytes(7e9, 8, stage).values()) / 1e9


def test_zero_stages_reproduce_the_course_table_for_7b_on_8_devices():
    # 16 bytes/param (2 + 2 + K, K = 12); GB = 1e9 bytes.
    assert [_total_gb(stage) for stage in (0, 1, 2, 3)] == pytest.approx([112, 38.5, 26.25, 14])
    by_part = zero_model_states_bytes(7e9, 8, 1)
    assert by_part == pytest.approx({"params": 14e9, "grads": 14e9, "optimizer": 84e9 / 8})


def test_zero_paper_figure_1_for_7_5b_on_64_devices():
    totals = [sum(zero_model_states_bytes(7.5e9, 64, s).values()) / 1e9 for s in (0, 1, 2, 3)]
    assert totals == pytest.approx([120, 31.4, 16.6, 1.88], abs=0.05)


def test_fp32_training_is_4_4_8_bytes_and_mixed_precision_2_2_12():
    assert dataclasses.astuple(state_bytes_per_param("fp32")) == (4, 4, 8)
    assert dataclasses.astuple(state_bytes_per_param("bf16")) == (2, 2, 12)


def test_korthikanti_activations_by_hand():
    s, b, h, a = 2048, 1, 4096, 32
    # 34 + 5·a·s/h = 34 + 80 = 114 bytes per s·b·h element
    assert activation_bytes_per_layer(s, b, h, a) == s * b * h * 114
    # tp=4 without sequence parallelism: 10 + 24/4 + 80/4 = 36
    assert activation_bytes_per_layer(s, b, h, a, tp=4) == s * b * h * 36
    assert activation_bytes_per_layer(s, b, h, a, recompute=True) == 2 * s * b * h
    assert activation_bytes_per_layer(s, b, h, a, attention_scores_stored=False) == s * b * h * 34
    assert activation_bytes_per_layer(s, b, h, a, dtype_bytes=4) == 2 * s * b * h * 114
    assert logits_bytes(s, b, 32000, tp=2) == 4 * s * b * 32000 / 2


def test_data_parallel_and_zero_communication_by_hand():
    psi, n = 1e9, 8
    dp = dp_comm_bytes(psi, n, 0, grad_bytes=2, param_bytes=2)
    assert dp == 2 * psi * 2 * 7 / 8  # ring all-reduce of 2-byte gradients
    for stage in (1, 2):
        assert dp_comm_bytes(psi, n, stage, grad_bytes=2, param_bytes=2) == pytest.approx(dp)
    assert dp_comm_bytes(psi, n, 3, grad_bytes=2, param_bytes=2) == pytest.approx(1.5 * dp)
    assert dp_comm_bytes(psi, 1, 3, grad_bytes=2, param_bytes=2) == 0.0
    # With 4 micro-steps stage 0 still reduces once; stage 2 reduce-scatters every micro-step.
    assert dp_comm_bytes(psi, n, 0, grad_bytes=2, param_bytes=2, grad_accum_steps=4) == dp
    assert dp_comm_bytes(
        psi, n, 2, grad_bytes=2, param_bytes=2, grad_accum_steps=4
    ) == pytest.approx(5 * psi * 2 * 7 / 8)


def test_gloo_and_fsdp_reductions_by_hand():
    """gloo all-reduces where NCCL reduce-scatters (twice the bytes)."""
    psi, n, m = 1e9, 2, 4
    half = psi * 4 / 2  # a ring gather of 4-byte elements over 2 ranks
    kw = {"grad_bytes": 4, "param_bytes": 4, "grad_accum_steps": m}
    assert dp_comm_bytes(psi, n, 2, **kw) == pytest.approx(m * half + half)
    gloo = dp_comm_bytes(psi, n, 2, **kw, reduce_scatter_as_all_reduce=True)
    assert gloo == pytest.approx(m * 2 * half + half)
    assert dp_comm_bytes(psi, n, 3, **kw) == pytest.approx(m * 3 * half)
    gloo3 = dp_comm_bytes(psi, n, 3, **kw, reduce_scatter_as_all_reduce=True)
    assert gloo3 == pytest.approx(m * 4 * half)
    assert dp_comm_bytes(psi, n, 0, **kw, reduce_scatter_as_all_reduce=True) == 2 * half


@pytest.mark.parametrize(
    ("overrides", "issued"),
    [
        # gloo collectives counted in rank 0's profiler trace, model=tiny, world_size=2
        # (benchmarks/cpu_runs/2026-11-28_gloo_in_step/): batch=small is 2 micro-batches
        (["strategy=dp"], 1),
        (["strategy=ddp"], 2),
        (["strategy=zero1"], 4),
        (["strategy=zero2"], 6),
        (["strategy=zero2", "batch=medium"], 10),
        (["strategy=zero3", "batch.grad_accum_steps=1"], 29),
        (["strategy=zero3"], 32),
        (["strategy=zero3", "batch=medium"], 38),
        (["strategy=zero3", "batch.grad_accum_steps=8"], 50),
        # FSDP reduce-scatters in every micro-batch since this change (it reduced in the last
        # when profiled: 18 + 5, 36 + 5, 34 + 9); tests/distributed checks a live trace
        (["strategy=fsdp"], 18 + 10),
        (["strategy=fsdp", "batch=medium"], 36 + 20),
        (["strategy=fsdp", "model.num_layers=8"], 34 + 18),
    ],
)
def test_data_parallel_collectives_are_those_the_engines_issued(overrides, issued):
    from distbench.figures.job_terms import device_shard, job_collectives
    from distbench.job import resolve_job

    job = resolve_job(compose_config(["world_size=2", *overrides]), CONF_DIR)
    assert job_collectives(job, device_shard(job))["dp"] == issued


def test_tensor_and_pipeline_communication_by_hand():
    b, s, h = 1, 2048, 4096
    one = b * s * h * 2  # 16 MiB of bf16 activations
    # 32 layers × 4 all-reduces × 2(t-1)/t with t = 2 → factor 1
    assert tp_comm_bytes(2, 32, b, s, h, act_bytes=2) == 32 * 4 * one
    assert tp_comm_bytes(4, 32, b, s, h, act_bytes=2, grad_accum_steps=2) == 2 * 32 * 4 * 1.5 * one
    assert tp_comm_bytes(1, 32, b, s, h, act_bytes=2) == 0
    assert pp_comm_bytes(4, b, s, h, act_bytes=2, num_micro=8) == 2 * 8 * one
    assert pp_comm_bytes(1, b, s, h, act_bytes=2, num_micro=8) == 0


def test_pipeline_bubble_by_hand():
    assert pipeline_bubble_fraction(1, 8) == 0
    assert pipeline_bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert pipeline_bubble_fraction(2, 2) == pytest.approx(1 / 3)


def _job(overrides: list[str], hardware: HardwareConfig | None = None) -> Job:
    """The resolved job on `hardware` (H100 unless given), whatever this host is."""
    job = resolve_job(compose_config(["hardware=h100_sxm", *overrides]), CONF_DIR)
    return job.replace(hardware=hardware or H100)


def _predict(overrides: list[str], hardware: HardwareConfig | None = None) -> Prediction:
    return predict(_job(overrides, hardware))


def test_predict_llama3_8b_dp_is_the_zero_formula_plus_activations():
    p = _predict(["model=llama3_8b", "world_size=8", "workload.dtype=bf16", "strategy=dp"])
    psi = p.num_params
    assert p.mem.params == p.mem.grads == 2 * psi
    assert p.mem.optimizer == 12 * psi
    assert p.mem.total > 16 * psi and p.fits is False  # 8B × 16 bytes = 120 GiB > 79.6
    # DeepSpeed's ZeRO-0 bf16 makes fp32 gradients inside the optimizer step (20 B there)
    assert p.mem.step_temp == 4 * psi and p.mem.terms["grads_fp32_at_step"] == 4 * psi
    # bf16-mixed reduces gradients in fp32 (communication_data_type): 4-byte ring all-reduce
    assert p.comm_bytes_per_step == pytest.approx(2 * 4 * psi * 7 / 8)
    assert p.tokens_per_s == pytest.approx(p.num_tokens_per_step / p.step_time_s)
    compute = p.flops_per_token * 2 * 2 * 128 / (989e12 * 0.4)
    assert p.time_s["compute"] == pytest.approx(compute)


def test_pipeline_prediction_has_the_bubble_and_halves_the_layers():
    pp = _predict(["model=llama3_8b", "world_size=8", "strategy=pp", "batch.grad_accum_steps=4"])
    dp = _predict(["model=llama3_8b", "world_size=8", "strategy=dp", "batch.grad_accum_steps=4"])
    # the last stage (16 layers + the LM head) sets the step; the first (16 layers) the bubble
    job = _job(["model=llama3_8b"])
    split = param_split(job.model)
    layers = 16 * split.per_layer
    head = split.matmul - 32 * split.per_layer
    attention = 12 * 16 * 4096 * job.batch.seq_len
    last, first = 6 * (layers + head) + attention, 6 * layers + attention
    assert pp.time_s["compute"] == pytest.approx(dp.time_s["compute"] * last / (last + first))
    assert pp.time_s["bubble"] == pytest.approx(pp.time_s["compute"] * first / last / 4)
    assert pp.time_s["bubble"] < pp.time_s["compute"] * (2 - 1) / 4  # equal stages' bubble
    assert pp.mem.params < 0.6 * dp.mem.params  # heaviest stage: 16 layers + a vocab table


def test_offload_moves_states_off_a_gpu_but_not_off_a_cpu():
    base = ["model=llama3_8b", "world_size=8", "workload.dtype=bf16"]
    zero2 = _predict([*base, "strategy=zero2"])
    off = _predict([*base, "strategy=zero2_offload"])
    # the optimizer states and the fp32 gradient partition move to the host
    moved = zero2.mem.optimizer + zero2.mem.terms["grads_fp32_partition_at_step"]
    assert off.mem.optimizer == 0 and off.mem.host == pytest.approx(moved)
    assert off.assumptions["host_mem_bytes_per_node"] > 0
    assert off.time_s["offload"] > 0
    z3off = _predict([*base, "strategy=zero3_offload"])
    assert z3off.mem.params < _predict([*base, "strategy=zero3"]).mem.params
    cpu = HardwareConfig(name="cpu", device="cpu", peak_tflops_fp32=0.1, price_usd_per_hour=0.09)
    on_cpu = _predict(["strategy=zero2_offload"], cpu)
    assert on_cpu.mem.host == 0 and on_cpu.mem.optimizer > 0 and on_cpu.time_s["offload"] == 0


def test_doubling_num_layers_doubles_the_per_layer_terms_only():
    base = ["model=llama3_8b", "world_size=8", "strategy=tp", "workload.dtype=bf16"]
    one, two = _predict(base), _predict([*base, "model.num_layers=64"])
    split = param_split(_job(base).model)
    logits = one.mem.terms["activations_logits"] + one.mem.terms["backward_grad_transient"]
    assert two.mem.terms["activations_logits"] == one.mem.terms["activations_logits"]
    assert two.mem.activations - logits == pytest.approx(2 * (one.mem.activations - logits))
    # the layers' all-reduces double; DeepSpeed's gathered LM head sends the same
    job = _job(base)
    b, s, h, v = job.batch.micro_batch_size, job.batch.seq_len, 4096, job.model.vocab_size
    tp, m = job.layout.tp, job.batch.grad_accum_steps
    head = tp_comm_bytes(tp, 0, b, s, h, act_bytes=2, grad_accum_steps=m, head_vocab=v)
    assert head > 0
    assert two.comm_bytes["tp"] - head == pytest.approx(2 * (one.comm_bytes["tp"] - head))
    # parameters: the layers double, the embedding and LM head do not
    layers = split.per_layer * split.num_layers
    assert two.num_params - one.num_params == pytest.approx(layers)
    attention = 12 * 32 * 4096 * 128
    assert two.flops_per_token - one.flops_per_token == pytest.approx(6 * layers + attention)


def test_llama3_70b_on_64_h100s_is_70_6b_params_and_zero3_is_smallest():
    ps = {
        s: _predict(["model=llama3_70b", "world_size=64", "workload.dtype=bf16", f"strategy={s}"])
        for s in ("dp", "zero1", "zero2", "zero3")
    }
    assert ps["dp"].num_params == 70_553_706_496
    totals = [ps[s].mem.total for s in ("dp", "zero1", "zero2", "zero3")]
    assert totals == sorted(totals, reverse=True)
    assert ps["dp"].mem.total > 1000 * GIB


def _fake(strategy: str, total_gib: float, tokens_per_s: float | None) -> Prediction:
    step = None if tokens_per_s is None else 1000 / tokens_per_s
    return Prediction(
        strategy=strategy,
        layout=Layout(world_size=8, dp=8, tp=1, pp=1, zero_stage=0),
        num_params=1,
        mem=Memory(params=total_gib * GIB, grads=0, optimizer=0, activations=0),
        device_mem_bytes=80 * GIB,
        comm_bytes={},
        offload_bytes_per_step=0.0,
        time_s={},
        num_tokens_per_step=1000,
        flops_per_token=1.0,
        step_time_s=step,
        tokens_per_s=tokens_per_s,
        cost_usd_per_1m_tokens=None,
    )


def test_recommend_takes_the_fastest_that_fits_and_names_the_numbers():
    best, reason = recommend(
        [_fake("dp", 112, 2000), _fake("zero2", 31.2, 1200), _fake("zero3", 14, 1000)]
    )
    assert best == "zero2"
    assert "31.2 of 80.0 GiB" in reason and "1,200 tokens/s" in reason
    assert "dp does not fit (112.0 GiB)" in reason


def test_recommend_prefers_less_sharding_within_two_percent_and_none_when_nothing_fits():
    best, reason = recommend([_fake("zero3", 14, 1010), _fake("zero1", 40, 1000)])
    assert best == "zero1" and "within 2%" in reason
    best, reason = recommend([_fake("dp", 112, 2000), _fake("zero3", 90, 1000)])
    assert best is None and "zero3 at 90.0 of 80.0 GiB" in reason


def test_torch_engine_is_sharded_like_its_zero_equivalent():
    stages = {
        s: zero_equivalent_stage(_job([f"strategy={s}", "world_size=2"]))
        for s in ("ddp", "fsdp", "dp", "zero1", "zero2", "zero3")
    }
    assert stages == {"ddp": 0, "fsdp": 3, "dp": 0, "zero1": 1, "zero2": 2, "zero3": 3}
    assert zero_equivalent_stage(_job(["strategy=single", "world_size=1"])) == 0
    base = ["model=llama3_8b", "world_size=8", "workload.dtype=bf16"]
    fsdp, zero3 = _predict([*base, "strategy=fsdp"]), _predict([*base, "strategy=zero3"])
    assert fsdp.layout.zero_stage == 3 and zero3.layout.zero_stage == 3
    # both shard everything; what differs is each engine's own buffers and recipe
    psi = fsdp.num_params
    assert fsdp.mem.params == pytest.approx(4 * psi / 8)  # fp32 shards: FSDP2's master
    assert zero3.mem.params == pytest.approx(2 * psi / 8)  # bf16 shards; fp32 master in optim
    assert fsdp.mem.optimizer == pytest.approx(8 * psi / 8)
    assert zero3.mem.optimizer == pytest.approx(12 * psi / 8)
    assert "fsdp_gathered_params" in fsdp.mem.terms and "zero3_live_params" in zero3.mem.terms
    assert fsdp.comm_bytes["dp"] > 0 and zero3.comm_bytes["dp"] > 0
    ddp, dp = _predict([*base, "strategy=ddp"]), _predict([*base, "strategy=dp"])
    assert ddp.layout.zero_stage == 0
    # torch bf16-mixed: fp32 weights, grads, AdamW states, autocast's bf16 weight copies, and
    # DDP's fp32 gradient buckets; DeepSpeed ZeRO-0 bf16: 2 + 2 + 12
    assert ddp.mem.params == pytest.approx((4 + 2) * psi)
    assert ddp.mem.grads == ddp.mem.terms["ddp_buckets"] == pytest.approx(4 * psi)
    assert dp.mem.params + dp.mem.grads + dp.mem.optimizer == pytest.approx(16 * psi)
    pure = _predict([*base, "strategy=ddp", "workload.precision=pure"])
    assert pure.mem.params + pure.mem.grads + pure.mem.optimizer == pytest.approx(8 * psi)


def test_pred_vs_measured_adds_the_cpu_runtime_and_gives_relative_errors():
    job = resolve_job(compose_config(["model=tiny", "hardware=cpu"]), CONF_DIR)
    job = job.replace(hardware=dataclasses.replace(job.hardware, peak_tflops_fp32=0.166))
    pred = predict(job)
    out = pred_vs_measured(job, {"peak_mem_gib": 0.73, "step_time_s_p50": 1.03})
    expected_mem = pred.mem.total / GIB
    runtime = cpu_rss.CPU_RUNTIME_GIB[job.engine] + cpu_rss.CPU_COMM_RUNTIME_GIB[job.engine]
    assert pred.mem.terms["runtime"] == pytest.approx(runtime * GIB)  # 2 ranks: they communicate
    retained = cpu_rss.CPU_HEAP_RETENTION_OF_ACTIVATIONS * pred.mem.activations
    assert pred.mem.runtime == pytest.approx(runtime * GIB + retained)  # dp: nothing sharded
    assert out["pred_peak_mem_gib"] == pytest.approx(expected_mem)
    assert out["mem_pred_rel_err"] == pytest.approx((expected_mem - 0.73) / 0.73)
    assert out["time_pred_rel_err"] == pytest.approx((pred.step_time_s - 1.03) / 1.03)
    assert out["pred_comm_bytes_per_step"] == pred.comm_bytes_per_step > 0
    json.dumps(out)
    # without a peak there is no time prediction, and no error is made up
    job = job.replace(hardware=dataclasses.replace(job.hardware, peak_tflops_fp32=None))
    assert set(pred_vs_measured(job, {"peak_mem_gib": 0.7})) == {
        "pred_peak_mem_gib",
        "pred_comm_bytes_per_step",
        "mem_pred_rel_err",
    }


# The first GPU record (benchmarks/gpu_runs/README.md: 2026-11-23, one H100 80GB, llama_1b
# bf16 batch=medium world_size 1): measured peak GiB (CUDA max allocated) per recipe and engine.
H100_RECORD = [
    (["strategy=single", "workload.precision=pure"], 15.56),  # torch, pure bf16
    (["strategy=single"], 27.7),  # fp32 master + bf16 autocast (the bare-script row)
    (["strategy=dp"], 25.04),  # DeepSpeed ZeRO-0, bf16 block
    (["strategy=zero3"], 29.7),
]


@pytest.mark.parametrize("overrides,measured_gib", H100_RECORD)
def test_predicted_peak_is_within_15_percent_of_the_h100_record(overrides, measured_gib):
    base = ["model=llama_1b", "workload.dtype=bf16", "batch=medium", "world_size=1"]
    p = _predict([*base, *overrides])
    assert p.mem.total / GIB == pytest.approx(measured_gib, rel=0.15)


def test_llama3_8b_single_pure_bf16_fits_an_h100_as_it_did():
    # it ran with a 62.5 GiB peak; the old planner said 120.8 GiB and "does not fit"
    pure = ["workload.dtype=bf16", "workload.precision=pure", "strategy=single", "world_size=1"]
    p = _predict(["model=llama3_8b", *pure])
    assert p.fits is True and p.mem.total / GIB == pytest.approx(62.5, rel=0.15)


def test_adamw_step_is_memory_bound_over_the_devices_shard():
    # 7 fp32 values per parameter (p, g, m, v read; p, m, v written), + the bf16 copy if mixed
    assert step_time.optimizer_step_s(1e9, 4, False, 2000.0) == pytest.approx(28e9 / 2000e9)
    assert step_time.optimizer_step_s(1e9, 4, True, 2000.0) == pytest.approx(30e9 / 2000e9)
    assert step_time.optimizer_step_s(1e9, 4, False, None) == 0.0  # CPU: inside the efficiency
    hbm = dataclasses.replace(H100, mem_bandwidth_gbps=3350.0)
    base = ["model=llama_1b", "world_size=8", "workload.dtype=bf16"]
    dp = _predict([*base, "strategy=dp"], hbm)
    zero1 = _predict([*base, "strategy=zero1"], hbm)
    assert dp.time_s["optimizer"] == pytest.approx(dp.num_params * 30 / 3350e9, rel=0.02)
    ddp = _predict([*base, "strategy=ddp"], hbm)  # fp32 parameters: no bf16 copy written
    assert ddp.time_s["optimizer"] == pytest.approx(ddp.num_params * 28 / 3350e9, rel=0.02)
    assert zero1.time_s["optimizer"] == pytest.approx(dp.time_s["optimizer"] / 8, rel=0.02)
    no_bandwidth = dataclasses.replace(H100, mem_bandwidth_gbps=None)
    assert _predict([*base, "strategy=dp"], no_bandwidth).time_s["optimizer"] == 0.0
    offload = _predict([*base, "strategy=zero3_offload"], hbm)
    assert offload.time_s["optimizer"] == 0.0  # the host's Adam, in the offload term


def test_torch_data_parallel_traffic_hides_under_compute_on_gpus_only():
    base = ["model=llama_1b", "world_size=8", "workload.dtype=bf16", "batch=medium"]
    for strategy in ("ddp", "fsdp"):
        p = _predict([*base, f"strategy={strategy}"])
        hidden = p.assumptions["comm_hidden_s"]
        assert 0 < hidden <= p.time_s["compute"], strategy
        assert p.time_s["comm"] > 0, strategy  # the last bucket / one layer stays exposed
        assert p.step_time_s == pytest.approx(sum(p.time_s.values()))
    deepspeed = _predict([*base, "strategy=zero3"])
    assert deepspeed.assumptions["comm_hidden_s"] == 0.0  # overlap_comm false in conf/ds_zero
    hidden = step_time.hidden_comm_s
    assert hidden("torch", "ddp", "cpu", 1.0, 0.5, 1e9, 16, 1) == 0.0  # one core for both
    # DDP: at most the last micro-batch's backward (2/3 of its compute) hides; at least the
    # last 25 MiB bucket of the gradients shows
    assert hidden("torch", "ddp", "cuda", 0.3, 1.0, 1e9, 16, 1) == pytest.approx(0.2)
    assert hidden("torch", "ddp", "cuda", 0.3, 1.0, 1e9, 16, 4) == pytest.approx(0.05)
    bucket_s = 1.0 * step_time.DDP_BUCKET_BYTES / 1e9
    assert hidden("torch", "ddp", "cuda", 9.0, 1.0, 1e9, 16, 1) == pytest.approx(1.0 - bucket_s)
    assert hidden("torch", "fsdp", "cuda", 9.0, 1.6, 1e9, 16, 4) == pytest.approx(1.5)


@pytest.mark.parametrize("tp", [1, 2])
def test_eager_attention_adds_its_scores_traffic_to_the_efficiency_model(tp):
    """HF's eager attention writes and reads its s × s scores (11 passes of b·heads·s²
    elements, forward + backward): the efficiency model adds them at the A100's HBM bandwidth,
    each tp rank for its heads; SDPA's fused kernels keep them on chip and add nothing."""
    base = [
        "hardware=a100_80gb",
        "hardware.time_source=efficiency",
        "workload.dtype=bf16",
        "model=llama_1b",
        "strategy=torch_tp" if tp > 1 else "strategy=ddp",
        f"world_size={tp if tp > 1 else 8}",
        "batch.micro_batch_size=2",
        "batch.grad_accum_steps=3",
        "batch.seq_len=2048",
    ]
    sdpa = predict(resolve_job(compose_config(base), CONF_DIR))
    eager_job = resolve_job(compose_config([*base, "model.attn_implementation=eager"]), CONF_DIR)
    eager = predict(eager_job)
    model = eager_job.model
    elements = 2 * (model.num_heads / tp) * 2048**2 * model.num_layers
    expected_s = 3 * 11 * elements * 2 / 2039e9  # 3 micro-batches, bf16, 2,039 GB/s
    assert eager.time_s["compute"] - sdpa.time_s["compute"] == pytest.approx(expected_s)
    assert expected_s > 0.05 * sdpa.time_s["compute"]  # not lost in the rounding
    assert step_time.eager_scores_s(2, 2048, 32, 16, 2, mem_bandwidth_gbps=None) == 0.0
