"""Parameter counts from the architecture equal the built model's; local weights load."""

from __future__ import annotations

import pytest
import torch

from distbench.ranks.models import build_meta_model, build_model, count_params
from tests.conftest import compose_config, config_options

pytestmark = pytest.mark.unit

SMALL = [
    "model.hidden_size=64",
    "model.num_layers=2",
    "model.num_heads=4",
    "model.intermediate_size=96",
    "model.vocab_size=512",
    "model.max_position_embeddings=256",
]


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=tiny"],
        ["model=tiny", "model.tie_word_embeddings=true"],
        ["model=gpt2_124m", *SMALL, "model.num_kv_heads=4"],
        ["model=llama_1b", *SMALL, "model.num_kv_heads=2"],
    ],
)
def test_architecture_count_equals_built_numel(overrides):
    model_cfg = compose_config(overrides).model
    model = build_model(model_cfg, "fp32", seed=0)
    counts = count_params(model_cfg)
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    lookups = model.get_input_embeddings().weight.numel()
    if model_cfg.family == "gpt2":
        lookups += model.transformer.wpe.weight.numel()
    tied = model_cfg.tie_word_embeddings
    expected_matmul = (
        counts["total"] - lookups + (model.get_input_embeddings().weight.numel() if tied else 0)
    )
    assert counts["matmul"] == expected_matmul


@pytest.mark.parametrize("model", config_options("model"))
def test_every_model_config_count_equals_meta_built_numel(model):
    """Full-size architectures built on the meta device: shapes only, nothing allocated."""
    model_cfg = compose_config([f"model={model}"]).model
    built = build_meta_model(model_cfg, "bf16")
    assert all(p.is_meta for p in built.parameters())
    assert count_params(model_cfg)["total"] == sum(p.numel() for p in built.parameters())


def test_same_seed_same_weights_and_dtype():
    model_cfg = compose_config(["model=tiny"]).model
    a, b = build_model(model_cfg, "bf16", seed=3), build_model(model_cfg, "bf16", seed=3)
    assert next(a.parameters()).dtype == torch.bfloat16
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_pretrained_path_loads_local_weights(tmp_path):
    cfg = compose_config(["model=tiny"])
    saved = build_model(cfg.model, "fp32", seed=7)
    saved.save_pretrained(tmp_path)
    cfg = compose_config(["model=tiny", f"model.pretrained_path={tmp_path}"])
    loaded = build_model(cfg.model, "fp32", seed=0)  # the seed must not matter
    pairs = zip(saved.parameters(), loaded.parameters(), strict=True)
    assert all(torch.equal(p, q) for p, q in pairs)
