"""Models built on meta and materialised per rank: the weights do not depend on the layout, and
a sharded rank allocates its shard, not the model (issue 12's "build on the device").

    python -m pytest tests/unit/test_meta_init.py -q
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from distbench.ranks.models import (
    build_meta_model,
    build_model,
    fill_param_,
    init_kind,
    local_block,
    materialise,
)
from tests.conftest import compose_config

BYTES_FP32 = 4


def test_a_row_shard_and_a_column_slice_hold_the_whole_parameters_values():
    whole = torch.empty(64, 48)
    fill_param_(whole, "layers.0.mlp.down_proj.weight", (64, 48), (0, 0), seed=5)
    rows = torch.empty(21, 48)  # FSDP2 / ZeRO-3: a run of rows
    fill_param_(rows, "layers.0.mlp.down_proj.weight", (64, 48), (22, 0), seed=5)
    cols = torch.empty(64, 12)  # TP row-wise: a slice of columns
    fill_param_(cols, "layers.0.mlp.down_proj.weight", (64, 48), (0, 36), seed=5)
    assert torch.equal(rows, whole[22:43])
    assert torch.equal(cols, whole[:, 36:48])
    assert abs(whole.std().item() - 0.02) < 0.002


def test_blocks_of_a_large_parameter_do_not_repeat_and_seeds_and_names_differ():
    big = torch.empty(3, 1 << 20)  # three generator blocks
    fill_param_(big, "embed.weight", tuple(big.shape), (0, 0), seed=1)
    assert not torch.equal(big[0], big[1])
    other_seed, other_name = torch.empty(3, 1 << 20), torch.empty(3, 1 << 20)
    fill_param_(other_seed, "embed.weight", tuple(big.shape), (0, 0), seed=2)
    fill_param_(other_name, "lm_head.weight", tuple(big.shape), (0, 0), seed=1)
    assert not torch.equal(big, other_seed) and not torch.equal(big, other_name)


def test_norms_are_ones_biases_zeros_matrices_normal():
    assert init_kind("model.norm.weight", (256,)) == "ones"
    assert init_kind("transformer.h.0.attn.c_attn.bias", (2304,)) == "zeros"
    assert init_kind("model.embed_tokens.weight", (8192, 256)) == "normal"


@pytest.mark.parametrize("model", ["tiny", "gpt2_124m"])
def test_built_model_runs_and_ties_and_rotary_tables_are_real(model):
    model_cfg = compose_config([f"model={model}"]).model
    built = build_model(model_cfg, "fp32", seed=3)
    assert not any(p.is_meta for p in built.parameters())
    assert all(torch.isfinite(b).all() for b in built.buffers())
    if model_cfg.tie_word_embeddings:
        assert built.get_output_embeddings().weight is built.get_input_embeddings().weight
    tokens = torch.randint(0, model_cfg.vocab_size, (2, 16))
    loss = built(input_ids=tokens, labels=tokens).loss.item()
    # random weights: the loss is about ln(vocab), not nan and not a trained model's
    assert abs(loss - torch.log(torch.tensor(float(model_cfg.vocab_size))).item()) < 1.0


def test_a_model_materialised_twice_is_the_same_and_the_seed_matters():
    model_cfg = compose_config(["model=tiny"]).model
    a = build_model(model_cfg, "fp32", seed=3)
    b = materialise(build_meta_model(model_cfg, "fp32"), "cpu", seed=3)
    c = build_model(model_cfg, "fp32", seed=4)
    pairs = list(zip(a.parameters(), b.parameters(), c.parameters(), strict=True))
    assert all(torch.equal(p, q) for p, q, _ in pairs)
    assert not all(torch.equal(p, r) for p, _, r in pairs)


@pytest.fixture
def fake_world():
    """One process playing rank r of a world of n: torch's fake process group (no traffic),
    enough for FSDP2 to shard a meta model exactly as that rank would."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def join(rank: int, world_size: int) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)

    yield join
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.parametrize("model", ["llama3_8b", "llama3_70b"])
def test_fsdp_at_world_size_8_materialises_a_shard_not_the_model(model, fake_world):
    """llama3_8b / 70B-shaped on meta, sharded by the engine's own FSDP2 code for rank 0 and
    rank 7 of 8: the bytes `materialise` would allocate (each DTensor's local block) are at most
    the rank's share plus one decoder layer, never the model."""
    from torch.distributed.device_mesh import init_device_mesh

    from distbench.engines.torch_native import _decoder_layers, apply_data_parallel

    model_cfg = compose_config([f"model={model}"]).model
    world_size = 8
    for rank in (0, world_size - 1):
        fake_world(rank, world_size)
        meta = build_meta_model(model_cfg, "fp32")
        total_bytes = sum(p.numel() for p in meta.parameters()) * BYTES_FP32
        layer_bytes = sum(p.numel() for p in _decoder_layers(meta)[0].parameters()) * BYTES_FP32
        mesh = init_device_mesh("cpu", (world_size,))
        sharded = apply_data_parallel(meta, "fsdp", mesh, "cpu", tp=1, pp=1)
        local_bytes = sum(local_block(p)[0].numel() for p in sharded.parameters()) * BYTES_FP32
        assert all(p.is_meta for p in sharded.parameters())  # nothing allocated yet
        assert local_bytes <= total_bytes / world_size + layer_bytes
        assert local_bytes >= total_bytes / world_size - layer_bytes
