"""transformers causal LMs built from a model config (random weights, nothing downloaded), or
loaded from a local `save_pretrained` directory; and their parameter counts from the
architecture alone, so the orchestrator computes FLOPs without importing torch.

    python -c "from distbench.ranks.models import *; ..."  # see tests/unit/test_models.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from distbench.compose.schema import ModelConfig

DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def layer_matrix_sizes(model_cfg: ModelConfig) -> list[int]:
    """Elements of each weight matrix of one decoder layer: Llama q, k, v, o (k and v as wide
    as the key/value heads), gate, up, down; GPT-2 c_attn, attn c_proj, c_fc, mlp c_proj."""
    h, inter = model_cfg.hidden_size, model_cfg.intermediate_size
    if model_cfg.family == "llama":
        kv = model_cfg.num_kv_heads * (h // model_cfg.num_heads)
        return [h * h, h * kv, h * kv, h * h, h * inter, h * inter, inter * h]
    if model_cfg.family == "gpt2":
        return [h * 3 * h, h * h, h * inter, inter * h]
    raise ValueError(f"model.family={model_cfg.family!r}; choose llama or gpt2")


def count_params(model_cfg: ModelConfig) -> dict[str, int]:
    """Parameter counts of the architecture: `total`, `embedding` (input token + position
    tables) and `matmul` (what multiplies activations: total minus the input lookups, the LM
    head included; a tied LM head shares the embedding table and counts once, as a matmul)."""
    h, layers, vocab = model_cfg.hidden_size, model_cfg.num_layers, model_cfg.vocab_size
    inter = model_cfg.intermediate_size
    matrices = sum(layer_matrix_sizes(model_cfg))
    if model_cfg.family == "llama":
        per_layer = matrices + 2 * h  # attn, SwiGLU, 2 RMSNorm
        token_embedding, position_embedding = vocab * h, 0
        body = layers * per_layer + h  # + final RMSNorm
    elif model_cfg.family == "gpt2":
        biases = 3 * h + h + inter + h  # c_attn, attn c_proj, c_fc, mlp c_proj
        per_layer = matrices + biases + 2 * 2 * h  # two LayerNorms (weight + bias)
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


# The weights' initialisation, named in the equivalence reference's cache key: change it when
# the values change.
INIT_SCHEME = "blocked-normal-v1"
INIT_STD = 0.02  # transformers' initializer_range default, for every matrix
BLOCK_ELEMENTS = 1 << 20  # one generator per block of a parameter's flattened values
_CHUNK_ELEMENTS = 1 << 22  # what one fill step handles (bounds the temporaries)


def init_kind(name: str, shape: tuple[int, ...]) -> str:
    """`normal` for matrices (linear, embedding, GPT-2's Conv1D), `zeros` for biases, `ones`
    for norm weights: transformers' _init_weights rule, told from the name and shape."""
    if len(shape) >= 2:
        return "normal"
    return "zeros" if name.endswith("bias") else "ones"


def param_key(seed: int, name: str) -> str:
    """The key of a parameter's streams: (seed, parameter name)."""
    return f"{seed}:{name}"


def block_seed(key: str, block: int) -> int:
    """A 32-bit generator seed per (parameter key, block): the CPU generator (mt19937) keeps 32
    bits of a seed, so the key and the block are hashed into them."""
    import hashlib

    return int(hashlib.sha256(f"{key}/{block}".encode()).hexdigest()[:8], 16)


def values_span(key: str, start: int, stop: int, device: Any) -> Any:
    """N(0, INIT_STD) values of flat positions [start, stop) of a parameter. Block b (positions
    [b*BLOCK_ELEMENTS, (b+1)*BLOCK_ELEMENTS)) is drawn by its own generator seeded (key, b), so
    any shard draws exactly its part of the whole parameter, and only the blocks it overlaps.
    The values depend on the device type's generator (CPU or CUDA), not on the device index,
    the engine or the layout."""
    import torch

    first, last = start // BLOCK_ELEMENTS, (stop - 1) // BLOCK_ELEMENTS
    blocks = []
    for block in range(first, last + 1):
        generator = torch.Generator(device=device).manual_seed(block_seed(key, block))
        values = torch.empty(BLOCK_ELEMENTS, device=device)
        blocks.append(values.normal_(0.0, INIT_STD, generator=generator))
    span = blocks[0] if len(blocks) == 1 else torch.cat(blocks)
    base = first * BLOCK_ELEMENTS
    return span[start - base : stop - base]


def fill_param_(
    local: Any, name: str, global_shape: tuple[int, ...], offsets: tuple[int, ...], seed: int
) -> None:
    """Fill `local`, the block of a parameter of `global_shape` that starts at `offsets`, with
    the values the whole parameter has at those positions (in place, rows chunk by chunk)."""
    import torch

    kind = init_kind(name, global_shape)
    if kind != "normal" or local.numel() == 0:
        local.fill_(1.0 if kind == "ones" else 0.0)
        return
    key, device = param_key(seed, name), local.device
    strides = [1] * len(global_shape)
    for d in range(len(global_shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * global_shape[d + 1]
    whole_rows = tuple(local.shape[1:]) == tuple(global_shape[1:])
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // max(1, local[0].numel()))
    for r0 in range(0, local.shape[0], rows_per_chunk):
        r1 = min(local.shape[0], r0 + rows_per_chunk)
        start = (offsets[0] + r0) * strides[0]
        if whole_rows:  # rows of full width: one contiguous span
            span = values_span(key, start, (offsets[0] + r1) * strides[0], device)
            local[r0:r1].copy_(span.view(local[r0:r1].shape))
            continue
        # A column slice (TP's row-wise split): the rows' span, then this slice's positions.
        span = values_span(key, start, (offsets[0] + r1) * strides[0], device)
        index = torch.arange(r1 - r0, device=device, dtype=torch.int64) * strides[0]
        for d in range(1, len(global_shape)):
            cols = torch.arange(local.shape[d], device=device, dtype=torch.int64) + offsets[d]
            index = index[..., None] + cols * strides[d]
        local[r0:r1].copy_(span[index])


def fill_flat_(part: Any, name: str, global_shape: tuple[int, ...], start: int, seed: int) -> None:
    """Fill `part`, flat positions [start, start + part.numel()) of a parameter of
    `global_shape` (a ZeRO-3 partition), with the whole parameter's values there."""
    kind = init_kind(name, global_shape)
    if kind != "normal" or part.numel() == 0:
        part.fill_(1.0 if kind == "ones" else 0.0)
        return
    part.copy_(values_span(param_key(seed, name), start, start + part.numel(), part.device))


def init_zero3_partitions_(module: Any, seed: int) -> None:
    """Under DeepSpeed ZeRO-3 (`deepspeed.zero.Init`) each parameter is a flat partition
    (`ds_tensor`: positions [rank * n, (rank + 1) * n), zero-padded past the end): fill this
    rank's positions with the values `init_weights_` gives the whole model, and recompute the
    rotary tables."""
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for name, param in module.named_parameters():
            part = param.ds_tensor.data.view(-1)
            start = dist.get_rank(group=param.ds_process_group) * part.numel()
            real = max(0, min(part.numel(), param.ds_numel - start))
            part[real:].zero_()
            fill_flat_(part[:real], _canonical(name), tuple(param.ds_shape), start, seed)
        _reset_buffers(module)


def local_block(param: Any) -> tuple[Any, tuple[int, ...], tuple[int, ...]]:
    """(the tensor this rank holds, the parameter's global shape, the block's global offsets):
    a DTensor (FSDP2 shard, TP slice) gives its local part, a plain tensor all of it."""
    from torch.distributed.tensor import DTensor

    if isinstance(param, DTensor):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        _, offsets = compute_local_shape_and_global_offset(
            param.shape, param.device_mesh, param.placements
        )
        return param.to_local(), tuple(param.shape), tuple(offsets)
    return param, tuple(param.shape), (0,) * param.dim()


def init_weights_(module: Any, seed: int) -> None:
    """Every parameter (or this rank's part of it) gets the deterministic values of
    `fill_param_`, and the rotary tables are recomputed: the same weights whatever the device,
    the engine or the sharding."""
    import torch

    with torch.no_grad():
        for name, param in module.named_parameters():
            local, shape, offsets = local_block(param)
            fill_param_(local, _canonical(name), shape, offsets, seed)
        _reset_buffers(module)


def _canonical(name: str) -> str:
    """A parameter's name without the wrappers' prefixes (DDP's module., FSDP's
    _fsdp_wrapped_module., a pipeline stage's), so every layout draws the same stream."""
    for prefix in ("module.", "_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module."):
        name = name.replace(prefix, "")
    return name


def _reset_buffers(module: Any) -> None:
    """Buffers of a model materialised from meta hold garbage: transformers' own _init_weights
    recomputes the rotary tables (the only buffers of the Llama and GPT-2 models here)."""
    owner = next((m for m in module.modules() if hasattr(m, "_init_weights")), None)
    for sub in module.modules():
        if any(True for _ in sub.buffers(recurse=False)):
            if owner is None or "RotaryEmbedding" not in type(sub).__name__:
                raise RuntimeError(f"cannot re-initialise the buffers of {type(sub).__name__}")
            owner._init_weights(sub)


def import_model_class(model_cfg: ModelConfig) -> Any:
    """The transformers class of the architecture, its modeling module imported (seconds on a
    cold start), so that a timed model build does not time the import."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    return MODEL_FOR_CAUSAL_LM_MAPPING[type(hf_config(model_cfg))]


def build_meta_model(model_cfg: ModelConfig, dtype: str) -> Any:
    """The architecture on the meta device in `dtype`: shapes only, nothing allocated."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(
            hf_config(model_cfg),
            attn_implementation=model_cfg.attn_implementation,
            dtype=getattr(torch, DTYPE_NAMES[dtype]),
        )


def materialise(module: Any, device: str, seed: int) -> Any:
    """Allocate a meta module's parameters (for a DTensor, this rank's part only) and buffers
    on `device`, fill them deterministically, re-tie tied embeddings; returns the module."""
    module.to_empty(device=_torch_device(device))
    for sub in module.modules():  # to_empty gives each module its own copy of a shared weight
        if hasattr(sub, "tie_weights") and getattr(sub.config, "tie_word_embeddings", False):
            sub.tie_weights()
            break
    init_weights_(module, seed)
    return module


def is_meta(module: Any) -> bool:
    """Whether `module` still has parameters on the meta device (not yet materialised)."""
    return any(p.is_meta for p in module.parameters())


def materialise_if_meta(module: Any, device: str, seed: int) -> Any:
    """`materialise` a module that is still on meta; a real one is returned as it is."""
    return materialise(module, device, seed) if is_meta(module) else module


def _torch_device(device: str) -> Any:
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else device


def build_model(model_cfg: ModelConfig, dtype: str, seed: int, device: str = "cpu") -> Any:
    """A causal LM in `dtype`, built straight on `device` (no host copy on a GPU): random
    weights from `seed` (built on meta, then materialised and filled by `init_weights_`), or
    the weights at pretrained_path (local files only: nothing is downloaded)."""
    import torch
    from transformers import AutoModelForCausalLM

    if model_cfg.pretrained_path:
        path = Path(model_cfg.pretrained_path)
        if any(path.glob("*.safetensors")):
            return load_safetensors(path, model_cfg.attn_implementation, dtype, device)
        model = AutoModelForCausalLM.from_pretrained(  # a .bin checkpoint: via the host
            path,
            dtype=getattr(torch, DTYPE_NAMES[dtype]),
            local_files_only=True,
            attn_implementation=model_cfg.attn_implementation,
        )
        return model.to(_torch_device(device))
    return materialise(build_meta_model(model_cfg, dtype), device, seed)


def load_safetensors(path: Path, attn_implementation: str, dtype: str, device: str) -> Any:
    """A `save_pretrained` directory's weights loaded file by file, tensor by tensor, straight
    onto `device` (the architecture is built on meta first): the host never holds the model."""
    import torch
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    torch_dtype = getattr(torch, DTYPE_NAMES[dtype])
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(
            config, attn_implementation=attn_implementation, dtype=torch_dtype
        )
    target = _torch_device(device)
    model.to_empty(device=target)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    params = dict(model.named_parameters())
    loaded: set[str] = set()
    with torch.no_grad():
        for file in sorted(path.glob("*.safetensors")):
            with safe_open(str(file), framework="pt", device=str(target)) as shard:
                for name in shard.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    if name in params:
                        params[name].copy_(shard.get_tensor(name))
                        loaded.add(name)
        _reset_buffers(model)
    missing = sorted(set(params) - loaded)
    if missing:
        raise ValueError(
            f"model.pretrained_path={path}: no weights for {len(missing)} parameter(s), e.g. "
            f"{missing[0]}"
        )
    return model
