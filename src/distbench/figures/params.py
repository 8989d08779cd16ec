"""Where a model's parameters sit: per decoder layer, in the embedding, in the LM head, and how
many of them one device holds under tensor and pipeline parallelism before ZeRO shards them.

    from distbench.figures.params import param_split, params_per_model_shard
    split = param_split(job.model)                     # a composed Job's ModelConfig
    params_per_model_shard(split, tp=2, pp=1)          # parameters per device before ZeRO

Counts come from `ranks.models.count_params`, the same count the built model is checked
against in the tests; nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from distbench.ranks.models import count_params

if TYPE_CHECKING:
    from distbench.compose.schema import ModelConfig


@dataclass(frozen=True)
class ParamSplit:
    """Where a model's parameters sit: per layer, and outside the layers."""

    total: int
    matmul: int
    per_layer: float
    num_layers: int
    input_embedding: int  # token (+ position) tables: on the first pipeline stage
    output_head: int  # LM head (a tied one is a copy of the table) + final norm: last stage
    largest_matrix: int  # the biggest single weight ZeRO-3 gathers at once


def param_split(model_cfg: ModelConfig) -> ParamSplit:
    """Split models.count_params (checked against the built model in tests) into layers and
    the rest, by counting the same architecture with zero layers."""
    counts = count_params(model_cfg)
    outside = count_params(dataclasses.replace(model_cfg, num_layers=0))["total"]
    table = model_cfg.vocab_size * model_cfg.hidden_size
    head = outside - counts["embedding"] + (table if model_cfg.tie_word_embeddings else 0)
    return ParamSplit(
        total=counts["total"],
        matmul=counts["matmul"],
        per_layer=(counts["total"] - outside) / model_cfg.num_layers,
        num_layers=model_cfg.num_layers,
        input_embedding=counts["embedding"],
        output_head=head,
        largest_matrix=max(table, model_cfg.hidden_size * model_cfg.intermediate_size),
    )


def params_per_model_shard(
    split: ParamSplit, tp: int, pp: int, *, outside_layers_whole: bool = False
) -> float:
    """Parameters one device holds before ZeRO: the heaviest pipeline stage, divided by tp
    (Megatron's vocab-parallel embedding); with outside_layers_whole (torch_tp replicates the
    embedding, final norm and LM head) only the decoder layers are divided."""
    layers = split.num_layers / pp * split.per_layer
    if pp == 1:
        outside = split.total - split.num_layers * split.per_layer
    else:
        outside = max(split.input_embedding, split.output_head)
    return layers / tp + outside / (1 if outside_layers_whole else tp)
