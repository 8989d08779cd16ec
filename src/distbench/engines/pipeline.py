"""Pipeline-parallel wrapping of Hugging Face causal LMs for DeepSpeed.

`to_pipeline_module` turns a Llama- or GPT-2-family ``*ForCausalLM`` (e.g. built with
``AutoModelForCausalLM.from_config``) into a ``deepspeed.pipe.PipelineModule``. The pieces reuse
the model's original modules and weights, so the first-step loss matches the unsplit model.

Pieces, in pipeline order (only the hidden-state tensor travels between stages):

1. token embedding (``embed_tokens`` / ``wte``), fed ``input_ids``;
2. GPT-2 only: learned position embedding (``wpe``) plus embedding dropout;
3. one ``_DecoderBlock`` per decoder layer, rebuilding what HF's model forward would hand it:
   ``position_ids = arange(seq_len)``, the causal mask from ``create_causal_mask`` for the
   configured attention implementation (eager gets a materialised mask, sdpa may get ``None``
   plus ``is_causal``), and for Llama the rotary ``(cos, sin)`` from ``rotary_emb``;
4. final norm (``norm`` / ``ln_f``);
5. LM head, then ``loss_fn(logits, labels)`` on the last stage (default: `causal_lm_loss`).

Tied embeddings (GPT-2, or any model whose ``lm_head.weight`` *is* the input embedding) stay
tied: pieces 1 and 5 are ``TiedLayerSpec``s sharing one key, DeepSpeed keeps a copy on the first
and last stage, broadcasts it at start-up and all-reduces its gradient every step.

`stage_module` cuts the same pieces into one ``nn.Sequential`` per stage for
``torch.distributed.pipelining`` (the torch engine's torch_pp and 3d; untied embeddings only).

Feed ``engine.train_batch(data_iter=it)`` with ``(input_ids, labels)`` LongTensor pairs of shape
``[micro_batch, seq_len]``; ``labels`` may simply be ``input_ids`` (shifted inside the loss).
``train_batch`` returns the mean loss over the micro-batches on every rank (the last stage
broadcasts it). DeepSpeed 0.19.8 caveat: with ZeRO stage 0 its gradient clipping (on by default,
1.0) only counts stage 0's gradients in the global norm; ZeRO-1 clips exactly like torch.

Self-check (compares the first ``train_batch`` loss with the HF loss for tiny random models)::

    DS_ACCELERATOR=cpu PYTHONPATH=src python -m torch.distributed.run --nproc_per_node=2 \
        -m distbench.engines.pipeline
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from transformers.masking_utils import create_causal_mask

if TYPE_CHECKING:
    from deepspeed.pipe import PipelineModule, TiedLayerSpec
    from transformers import PreTrainedConfig, PreTrainedModel

_TIE_KEY = "embed"


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross entropy, as HF computes it: logits[:, :-1] vs labels[:, 1:], mean."""
    logits = logits[:, :-1].flatten(0, 1).float()
    return F.cross_entropy(logits, labels[:, 1:].flatten(), ignore_index=-100)


class _TokenEmbedding(nn.Module):
    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        self.embedding = embedding

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(input_ids)


def _tied_lm_head(tied: _TokenEmbedding, hidden: torch.Tensor) -> torch.Tensor:
    return F.linear(hidden, tied.embedding.weight)


class _PositionEmbedding(nn.Module):
    def __init__(self, wpe: nn.Embedding, dropout: nn.Module) -> None:
        super().__init__()
        self.wpe = wpe
        self.dropout = dropout

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(hidden.shape[1], device=hidden.device)
        return self.dropout(hidden + self.wpe(positions))


class _DecoderBlock(nn.Module):
    def __init__(
        self, layer: nn.Module, config: PreTrainedConfig, rotary: nn.Module | None
    ) -> None:
        super().__init__()
        self.layer = layer
        self.config = config
        self.rotary = rotary

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        position_ids = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        mask = create_causal_mask(
            config=self.config,
            inputs_embeds=hidden,
            attention_mask=None,
            past_key_values=None,
            position_ids=position_ids,
        )
        kwargs: dict[str, object] = {"attention_mask": mask, "position_ids": position_ids}
        if self.rotary is not None:  # Llama: rotary (cos, sin), as LlamaModel.forward passes them
            kwargs["position_embeddings"] = self.rotary(hidden, position_ids)
        return self.layer(hidden, **kwargs)


def to_pipeline_module(
    model: PreTrainedModel,
    num_stages: int,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    partition_method: str = "uniform",
    activation_checkpoint_interval: int = 0,
) -> PipelineModule:
    """Split a Llama/GPT-2 causal LM into a DeepSpeed ``PipelineModule`` of ``num_stages``.

    ``partition_method="uniform"`` spreads the *decoder blocks* evenly (DeepSpeed's own
    ``"uniform"`` would count embedding, norm and head as layers too); any other value
    (``"parameters"``, ``"type:<regex>"``) is passed to DeepSpeed unchanged. DeepSpeed's own
    ``activation_checkpoint_interval`` only wraps runs of decoder blocks, so the embedding still
    gets gradients; distbench's engines leave it 0 and checkpoint the stage's decoder layers
    themselves (``activation_checkpointing``, ranks/layers.py), as on every engine.
    ``torch.distributed`` must already be initialised (e.g. ``deepspeed.init_distributed()``).
    The weights of other stages' pieces are released on this rank (emptied in place), so a
    stage holds only its own share of the model, as it would on a real pipeline.
    """
    from deepspeed.pipe import PipelineModule, TiedLayerSpec

    base = model.base_model
    if hasattr(base, "wpe"):  # GPT-2
        token_embedding, blocks, final_norm, rotary = base.wte, base.h, base.ln_f, None
        positional: list[nn.Module] = [_PositionEmbedding(base.wpe, base.drop)]
    elif hasattr(base, "rotary_emb"):  # Llama
        token_embedding, blocks, final_norm = base.embed_tokens, base.layers, base.norm
        rotary, positional = base.rotary_emb, []
    else:
        raise ValueError(f"unsupported model family: {type(model).__name__}")

    lm_head = model.get_output_embeddings()
    if lm_head.weight is token_embedding.weight:
        embed: nn.Module | TiedLayerSpec = TiedLayerSpec(
            _TIE_KEY, _TokenEmbedding, token_embedding, tied_weight_attr="embedding.weight"
        )
        head: nn.Module | TiedLayerSpec = TiedLayerSpec(
            _TIE_KEY,
            _TokenEmbedding,
            token_embedding,
            forward_fn=_tied_lm_head,
            tied_weight_attr="embedding.weight",
        )
    else:
        embed, head = _TokenEmbedding(token_embedding), lm_head

    decoder = [_DecoderBlock(layer, model.config, rotary) for layer in blocks]
    if partition_method == "uniform":
        partition_method = f"type:^{_DecoderBlock.__name__}$"
    pipe = PipelineModule(
        layers=[embed, *positional, *decoder, final_norm, head],
        num_stages=num_stages,
        loss_fn=loss_fn or causal_lm_loss,
        partition_method=partition_method,
        activation_checkpoint_interval=activation_checkpoint_interval,
        checkpointable_layers=[_DecoderBlock.__name__],
    )
    owned = {id(p) for p in pipe.parameters()}
    for param in model.parameters():
        if id(param) not in owned:
            param.data = torch.empty(0, dtype=param.dtype, device=param.device)
    return pipe


def stage_module(model: PreTrainedModel, stage: int, num_stages: int) -> nn.Sequential:
    """Stage `stage` of `num_stages` of a Llama/GPT-2 causal LM with untied embeddings, as one
    ``nn.Sequential`` for ``torch.distributed.pipelining``: the same pieces as
    `to_pipeline_module` (embedding [+ positions] on the first stage, decoder blocks split
    evenly, final norm + LM head on the last stage); input ids in, logits out of the last stage.
    Other stages' weights are released on this rank. Loss: `causal_lm_loss(logits, labels)`."""
    base = model.base_model
    if hasattr(base, "wpe"):  # GPT-2
        first: list[nn.Module] = [
            _TokenEmbedding(base.wte),
            _PositionEmbedding(base.wpe, base.drop),
        ]
        blocks, final_norm, rotary = base.h, base.ln_f, None
    elif hasattr(base, "rotary_emb"):  # Llama
        first, blocks, final_norm, rotary = (
            [_TokenEmbedding(base.embed_tokens)],
            base.layers,
            base.norm,
            base.rotary_emb,
        )
    else:
        raise ValueError(f"unsupported model family: {type(model).__name__}")
    lm_head = model.get_output_embeddings()
    if lm_head.weight is first[0].embedding.weight:
        raise ValueError("tied input/output embeddings cannot be split across pipeline stages")
    per_stage = len(blocks) // num_stages
    pieces = [_DecoderBlock(layer, model.config, rotary) for layer in blocks]
    pieces = pieces[stage * per_stage : (stage + 1) * per_stage]
    if stage == 0:
        pieces = [*first, *pieces]
    if stage == num_stages - 1:
        pieces = [*pieces, final_norm, lm_head]
    module = nn.Sequential(*pieces)
    owned = {id(p) for p in module.parameters()}
    for param in model.parameters():
        if id(param) not in owned:
            param.data = torch.empty(0, dtype=param.dtype, device=param.device)
    return module


def _self_check() -> None:
    import deepspeed
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    deepspeed.init_distributed()
    rank = torch.distributed.get_rank()
    # Tiny random models; GPT-2 dropout off so both sides see identical activations.
    llama = {"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4}
    gpt2 = {"n_embd": 128, "n_layer": 4, "n_head": 4, "resid_pdrop": 0.0, "embd_pdrop": 0.0}
    configs = [
        LlamaConfig(vocab_size=1024, num_key_value_heads=2, intermediate_size=256, **llama),
        GPT2Config(vocab_size=1024, attn_pdrop=0.0, **gpt2),
    ]
    for config in configs:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
        batches = [torch.randint(0, config.vocab_size, (2, 32)) for _ in range(2)]
        with torch.no_grad():
            reference = sum(model(input_ids=x, labels=x).loss.item() for x in batches) / 2
        pipe = to_pipeline_module(model, num_stages=torch.distributed.get_world_size())
        engine, *_ = deepspeed.initialize(
            model=pipe,
            optimizer=torch.optim.AdamW(pipe.parameters(), lr=1e-4),
            config={"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2},
        )
        loss = engine.train_batch(data_iter=iter([(x, x) for x in batches])).item()
        if rank == 0:
            print(f"{type(model).__name__}: pipeline {loss:.7f} vs HF {reference:.7f}")
            assert abs(loss - reference) < 1e-5, "pipeline loss differs from the HF model's"


if __name__ == "__main__":
    _self_check()
