"""The planner's model (figures/) against outside references computed here, not typed-in
numbers: DeepSpeed's own memory estimators, torch's FlopCounterMode and the tensors HF's models
really save for backward (on the real tiny and GPT-2-shaped models, CPU, fp32), and the loss's
peak in the profiler's memory timeline (bf16 and fp32).

    .venv/bin/python -m pytest -q tests/unit/test_analytic_references.py
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from distbench.figures.activations import (
    activation_bytes_per_layer,
    hf_activation_bytes_per_layer,
    loss_logits_bytes,
)
from distbench.figures.metrics import train_flops_per_token
from distbench.figures.model_states import (
    deepspeed_host_bytes_per_node,
    engine_state_terms,
    state_term_bytes,
)
from distbench.figures.params import ParamSplit, param_split
from distbench.ranks.models import count_params, hf_config
from tests.conftest import compose_config

pytestmark = pytest.mark.unit


def _model(name: str, **changes: object):
    from distbench.compose.schema import ModelConfig

    cfg = compose_config([f"model={name}"]).model
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    model = ModelConfig(**{k: v for k, v in dict(cfg).items() if k in fields})
    return dataclasses.replace(model, **changes)


def _states(engine_stage: int, split: ParamSplit, dp: int) -> float:
    """Model-state bytes per device of DeepSpeed bf16-mixed: every term, step ones included."""
    terms = engine_state_terms("deepspeed", "bf16", "mixed", engine_stage)
    return sum(state_term_bytes(terms, split.total, dp, engine_stage).values())


@pytest.mark.parametrize("name", ["gpt2_124m", "llama_1b", "llama3_8b", "llama3_70b"])
@pytest.mark.parametrize("num_nodes", [1, 8])
def test_zero2_and_zero3_states_agree_with_deepspeeds_estimators(name, num_nodes):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    split = param_split(_model(name))
    world = 8 * num_nodes
    _, ds_zero2 = estimate_zero2_model_states_mem_needs(
        split.total, num_gpus_per_node=8, num_nodes=num_nodes, cpu_offload=False
    )
    assert _states(2, split, world) == pytest.approx(ds_zero2, rel=0.15)
    _, ds_zero3, largest = estimate_zero3_model_states_mem_needs(
        split.total, split.largest_matrix, 8, num_nodes, cpu_offload=False
    )
    # DeepSpeed's 4 B × the largest layer: its bf16 weight and gradient, gathered
    ours = _states(3, split, world) + (2 + 2) * split.largest_matrix
    assert largest == 4 * split.largest_matrix
    assert ours == pytest.approx(ds_zero3, rel=0.15)
    # offload's host RAM per node is DeepSpeed's own figure (ZeRO-2's is the whole job's:
    # spread over the nodes)
    for stage, offload_param in ((2, False), (3, False), (3, True)):
        if stage == 2:
            ds_cpu, _ = estimate_zero2_model_states_mem_needs(
                split.total, 8, num_nodes, cpu_offload=True
            )
            ds_cpu /= num_nodes
        else:
            ds_cpu, _, _ = estimate_zero3_model_states_mem_needs(
                split.total, split.largest_matrix, 8, num_nodes, True, offload_param, True
            )
        ours = deepspeed_host_bytes_per_node(
            split.total, 8, num_nodes, zero_stage=stage, offload_param=offload_param
        )
        assert ours == pytest.approx(ds_cpu, rel=1e-6)


def test_the_all_cold_estimator_prints_what_the_planner_predicts(capsys):
    from deepspeed.runtime.zero.stage_1_and_2 import (
        estimate_zero2_model_states_mem_needs_all_cold,
    )

    split = param_split(_model("llama3_8b"))
    estimate_zero2_model_states_mem_needs_all_cold(split.total, num_gpus_per_node=8)
    printed = capsys.readouterr().out.splitlines()
    no_offload = next(line for line in printed if "offload_optimizer=none" in line)
    per_gpu_gib = float(no_offload.split("|")[1].strip().removesuffix("GB"))
    assert _states(2, split, 8) / 2**30 == pytest.approx(per_gpu_gib, rel=0.01)


def _hf_model(model_cfg, attn: str):
    from transformers import AutoModelForCausalLM

    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config(model_cfg), attn_implementation=attn)
    return model.train()


@pytest.mark.parametrize(
    "name,changes", [("tiny", {}), ("gpt2_124m", {"num_layers": 2, "max_position_embeddings": 256})]
)
def test_flops_per_token_agree_with_flop_counter_mode(name, changes):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model_cfg = _model(name, **changes)
    model = _hf_model(model_cfg, "eager")
    b, s = 2, 128
    ids = torch.randint(0, model_cfg.vocab_size, (b, s))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    counts = count_params(model_cfg)
    predicted = train_flops_per_token(
        counts["matmul"], model_cfg.num_layers, model_cfg.hidden_size, s
    )
    assert counter.get_total_flops() == pytest.approx(predicted * b * s, rel=0.03)


def _saved_bytes(module, forward) -> dict[int, int]:
    """The bytes of each storage autograd saves for backward while `forward()` runs, less
    `module`'s parameters (saved-tensor hooks)."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return saved


@pytest.mark.parametrize(
    "name,attn,changes",
    [
        ("tiny", "sdpa", {}),
        ("tiny", "eager", {}),
        ("tiny", "sdpa", {"num_layers": 8}),
        ("gpt2_124m", "eager", {"num_layers": 2, "max_position_embeddings": 256}),
        ("gpt2_124m", "eager", {"num_layers": 4, "max_position_embeddings": 256}),
    ],
)
def test_activations_agree_with_what_hf_saves_for_backward(name, attn, changes):
    import torch

    model_cfg = _model(name, **changes)
    model = _hf_model(model_cfg, attn)
    b, s = 2, 128
    ids = torch.randint(0, model_cfg.vocab_size, (b, s))
    saved = _saved_bytes(model, lambda: model(input_ids=ids, labels=ids))
    per_layer = hf_activation_bytes_per_layer(
        model_cfg.family,
        s,
        b,
        model_cfg.hidden_size,
        model_cfg.intermediate_size,
        model_cfg.num_heads,
        dtype_bytes=4,
        attention_scores_stored=attn == "eager",
    )
    # + the loss's saved fp32 log-softmax (4 B per logit), the part of the logits saved
    predicted = per_layer * model_cfg.num_layers + 4 * b * s * model_cfg.vocab_size
    assert sum(saved.values()) == pytest.approx(predicted, rel=0.10)
    # Korthikanti's GPT-3 layer is a lower bound of what HF's layers keep
    korthikanti = activation_bytes_per_layer(
        s,
        b,
        model_cfg.hidden_size,
        model_cfg.num_heads,
        dtype_bytes=4,
        attention_scores_stored=False,
    )
    assert per_layer > 0.8 * korthikanti


def _layer_saved_bytes(model, dtype) -> float:
    """What one decoder layer of `model` (cast to `dtype`) saves for backward per token."""
    import torch

    model = model.to(dtype)
    layer = model.model.layers[0]
    b, s = 2, 128
    hidden = torch.randn(b, s, model.config.hidden_size, dtype=dtype, requires_grad=True)
    rotary = model.model.rotary_emb(hidden, torch.arange(s)[None])
    saved = _saved_bytes(
        layer, lambda: layer(hidden, position_embeddings=rotary, attention_mask=None)
    )
    return sum(saved.values()) / (b * s)


def test_a_16_bit_llama_layer_keeps_its_norms_fp32_upcasts():
    """Without autocast a bf16 Llama layer's RMSNorms save an fp32 copy of their input:
    FP32_UPCAST_NORMS × (4 − 2)·h bytes per token beyond dtype × HF_SAVED_ELEMENTS."""
    import torch

    model_cfg = _model("tiny")
    model = _hf_model(model_cfg, "sdpa")
    shape = (model_cfg.family, 1, 1, model_cfg.hidden_size, model_cfg.intermediate_size)
    fp32, bf16 = (_layer_saved_bytes(model, dt) for dt in (torch.float32, torch.bfloat16))
    predicted = hf_activation_bytes_per_layer(
        *shape, model_cfg.num_heads, dtype_bytes=2, norms_upcast=True
    )
    assert bf16 == pytest.approx(predicted, rel=0.10)
    without = hf_activation_bytes_per_layer(*shape, model_cfg.num_heads, dtype_bytes=2)
    assert abs(bf16 - predicted) < abs(bf16 - without)
    # the upcast copies are what bf16 keeps beyond half of fp32's bytes: 2 norms × 2 B × h
    upcast = bf16 - fp32 / 2
    assert upcast == pytest.approx(4 * model_cfg.hidden_size, rel=0.10)


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float32"])
def test_the_loss_peak_per_logit_is_what_the_profiler_sees(dtype_name, tmp_path):
    """HF's causal-LM loss and its backward on a logits-sized problem: the live bytes' peak in
    the profiler's memory timeline (every CPU allocation and free) is `loss_logits_bytes`."""
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers.loss.loss_utils import ForCausalLMLoss

    dtype = getattr(torch, dtype_name)
    b, s, v, h = 2, 256, 8192, 16
    hidden = torch.randn(b, s, h, dtype=dtype, requires_grad=True)
    head = torch.randn(v, h, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, v, (b, s))
    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
    ) as prof:
        loss = ForCausalLMLoss(hidden @ head.t(), labels, vocab_size=v)
        loss.backward()
    timeline = tmp_path / "timeline.json"  # this suffix: [times, bytes by category] rows
    with warnings.catch_warnings():
        # deprecated in favour of CUDA's snapshots, present in the pinned torch 2.13
        warnings.simplefilter("ignore", FutureWarning)
        prof.export_memory_timeline(str(timeline), device="cpu")
    _, bytes_by_category = json.loads(timeline.read_text())
    peak_bytes = max(sum(row) for row in bytes_by_category)
    # the inputs' gradients (b·s·h + v·h elements) are small beside the logits
    assert peak_bytes == pytest.approx(loss_logits_bytes(s, b, v), rel=0.05)


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float32"])
def test_the_loss_parallel_peak_per_logit_is_what_the_profiler_sees(dtype_name, tmp_path):
    """The same loss on logits split by vocabulary (a DTensor sharded on its last dim, as the
    torch engine's vocab-parallel head gives it) under loss_parallel, on a one-rank gloo mesh
    (two ranks measure the same per local logit): LOSS_PARALLEL_PEAK_BYTES_PER_LOGIT."""
    import warnings

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import loss_parallel
    from torch.profiler import ProfilerActivity, profile
    from transformers.loss.loss_utils import ForCausalLMLoss

    from distbench.figures.activations import LOSS_PARALLEL_PEAK_BYTES_PER_LOGIT

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        dtype = getattr(torch, dtype_name)
        b, s, v, h = 2, 256, 8192, 16
        hidden = distribute_tensor(torch.randn(b, s, h, dtype=dtype), mesh, [Replicate()])
        head = distribute_tensor(torch.randn(v, h, dtype=dtype), mesh, [Shard(0)])
        hidden.requires_grad_()
        head.requires_grad_()
        labels = torch.randint(0, v, (b, s))
        with (
            profile(
                activities=[ProfilerActivity.CPU],
                profile_memory=True,
                record_shapes=True,
                with_stack=True,
            ) as prof,
            loss_parallel(),
        ):
            ForCausalLMLoss(hidden @ head.t(), labels, vocab_size=v).backward()
        timeline = tmp_path / "timeline.json"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            prof.export_memory_timeline(str(timeline), device="cpu")
        _, bytes_by_category = json.loads(timeline.read_text())
        peak_bytes = max(sum(row) for row in bytes_by_category)
        per_logit = peak_bytes / (b * s * v)
        assert per_logit == pytest.approx(LOSS_PARALLEL_PEAK_BYTES_PER_LOGIT, rel=0.05)
        assert per_logit > 1.25 * 12  # above the fused kernel's 12 B
    finally:
        dist.destroy_process_group()
