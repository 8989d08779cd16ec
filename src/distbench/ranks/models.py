"""transformers causal LMs built from a model config (random weights, nothing downloaded), or
loaded from a local `save_pretrained` directory; and their parameter counts from the
architecture alone, so the orchestrator computes FLOPs without importing torch.

    python -c "from distbench.ranks.models import *; ..."  # see tests/unit/test_models.py
"""

from __future__ import annotations

from typing import Any

from distbench.compose.schema import ModelConfig

DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def count_params(model_cfg: ModelConfig) -> dict[str, int]:
    """Parameter counts of the architecture: `total`, `embedding` (input token + position
    tables) and `matmul` (what multiplies activations: total minus the input lookups, the LM
    head included; a tied LM head shares the embedding table and counts once, as a matmul)."""
    h, layers, vocab = model_cfg.hidden_size, model_cfg.num_layers, model_cfg.vocab_size
    inter = model_cfg.intermediate_size
    if model_cfg.family == "llama":
        head_dim = h // model_cfg.num_heads
        kv = model_cfg.num_kv_heads * head_dim
        per_layer = (h * h + 2 * h * kv + h * h) + 3 * h * inter + 2 * h  # attn, SwiGLU, 2 RMSNorm
        token_embedding, position_embedding = vocab * h, 0
        body = layers * per_layer + h  # + final RMSNorm
    elif model_cfg.family == "gpt2":
        attn = h * 3 * h + 3 * h + h * h + h  # c_attn, c_proj with biases
        mlp = h * inter + inter + inter * h + h  # c_fc, c_proj with biases
        per_layer = attn + mlp + 2 * 2 * h  # two LayerNorms (weight + bias)
        token_embedding, position_embedding = vocab * h, model_cfg.max_position_embeddings * h
        body = layers * per_layer + 2 * h  # + ln_f
    else:
        raise ValueError(f"model.family={model_cfg.family!r}; choose llama or gpt2")
    lm_head = 0 if model_cfg.tie_word_embeddings else vocab * h
    total = token_embedding + position_embedding + body + lm_head
    input_lookups = position_embedding + (0 if model_cfg.tie_word_embeddings else token_embedding)
    return {
        "total": total,
        "embedding": token_embedding + position_embedding,
        "matmul": total - input_lookups,
    }


def hf_config(model_cfg: ModelConfig) -> Any:
    """The transformers config object for a distbench model config."""
    from transformers import GPT2Config, LlamaConfig

    if model_cfg.family == "llama":
        return LlamaConfig(
            vocab_size=model_cfg.vocab_size,
            hidden_size=model_cfg.hidden_size,
            num_hidden_layers=model_cfg.num_layers,
            num_attention_heads=model_cfg.num_heads,
            num_key_value_heads=model_cfg.num_kv_heads,
            intermediate_size=model_cfg.intermediate_size,
            max_position_embeddings=model_cfg.max_position_embeddings,
            tie_word_embeddings=model_cfg.tie_word_embeddings,
        )
    if model_cfg.family == "gpt2":
        return GPT2Config(
            vocab_size=model_cfg.vocab_size,
            n_embd=model_cfg.hidden_size,
            n_layer=model_cfg.num_layers,
            n_head=model_cfg.num_heads,
            n_inner=model_cfg.intermediate_size,
            n_positions=model_cfg.max_position_embeddings,
            tie_word_embeddings=model_cfg.tie_word_embeddings,
            # No dropout: a benchmark step must be deterministic across strategies.
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
    raise ValueError(f"model.family={model_cfg.family!r}; choose llama or gpt2")


def build_model(model_cfg: ModelConfig, dtype: str, seed: int) -> Any:
    """A causal LM in `dtype`: random weights from `seed`, or the weights at pretrained_path
    (local files only: nothing is downloaded)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = getattr(torch, DTYPE_NAMES[dtype])
    if model_cfg.pretrained_path:
        return AutoModelForCausalLM.from_pretrained(
            model_cfg.pretrained_path,
            dtype=torch_dtype,
            local_files_only=True,
            attn_implementation=model_cfg.attn_implementation,
        )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(
        hf_config(model_cfg), attn_implementation=model_cfg.attn_implementation
    )
    return model.to(torch_dtype)
