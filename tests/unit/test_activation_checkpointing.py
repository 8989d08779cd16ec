"""Activation checkpointing and compile, without launching ranks: the keys (resolve, refusals,
signature, tags), the planner's formulas and rows, and the per-layer switch on a real tiny HF
model in this process (recompute is exact; what autograd saves shrinks as the planner says).

    python -m pytest tests/unit/test_activation_checkpointing.py -q
"""

from __future__ import annotations

import dataclasses

import pytest

from distbench.compose.schema import ConfigError
from distbench.figures.activations import (
    checkpointed_layer_terms,
    num_recomputed_layers,
    recompute_flops_fraction,
)
from distbench.figures.metrics import GIB
from distbench.figures.predict import predict
from distbench.job import Job, resolve_job
from distbench.orchestrator import describe
from distbench.ranks.layers import recomputed_layers
from distbench.tracking.signature import run_signature
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

CPU = ["hardware=cpu", "hardware.mem_gib=24", "hardware.time_source=efficiency"]
# The recipe: llama3_8b on 8 H100s, local batch 2 × 8192 tokens, bf16.
RECIPE_8B = ["model=llama3_8b", "world_size=8", "hardware=h100_sxm", "workload.dtype=bf16"]
RECIPE_8B += ["batch.micro_batch_size=2", "batch.grad_accum_steps=1", "batch.seq_len=8192"]
# A search small enough for a unit test: llama_1b on 2 H100s at 8192 tokens (micro batch 3:
# tp 2 fits without checkpointing, dp 2 with selective or full).
RECIPE_1B_8K = ["model=llama_1b", "world_size=2", *RECIPE_8B[2:]]


def job_of(*overrides: str) -> Job:
    return resolve_job(compose_config(list(overrides)), CONF_DIR)


def test_the_keys_resolve_onto_the_job_its_tree_tags_and_signature():
    default, full = job_of(*CPU), job_of(*CPU, "activation_checkpointing=full")
    assert (default.activation_checkpointing, full.activation_checkpointing) == ("none", "full")
    assert full.tree()["activation_checkpointing"] == "full"  # a param of the run
    assert Job.from_tree(full.tree()).activation_checkpointing == "full"  # the ranks read it
    assert describe(full)["activation_checkpointing"] == "full"
    assert describe(full)["compile"] == "false"
    # none (the default) is not hashed: the signatures of runs recorded before the key stay
    tree = default.tree()
    older = {k: v for k, v in tree.items() if not k.startswith("activation_checkpointing")}
    older["workload"] = {k: v for k, v in tree["workload"].items() if k != "compile"}
    assert run_signature(tree) == run_signature(older)
    assert Job.from_tree(older).activation_checkpointing == "none"  # an older resolved.yaml
    compiled = default.replace(workload=dataclasses.replace(default.workload, compile=True))
    variants = [
        default,
        full,
        default.replace(activation_checkpointing="selective"),
        default.replace(activation_checkpointing="selective", activation_checkpointing_every=3),
        compiled,
    ]
    assert len({run_signature(job.tree()) for job in variants}) == 5
    assert describe(compiled)["compile"] == "true"
    every_3 = full.replace(activation_checkpointing_every=3)  # counts only under selective
    assert run_signature(every_3.tree()) == run_signature(full.tree())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["activation_checkpointing=partial"],
            "activation_checkpointing='partial' is not allowed; choose one of "
            "['none', 'full', 'selective']",
        ),
        (
            ["activation_checkpointing=selective", "activation_checkpointing_every=0"],
            "activation_checkpointing_every=0 must be an integer >= 1",
        ),
        (
            ["workload=gemm", "activation_checkpointing=full"],
            "activation_checkpointing=full: workload=gemm builds no model",
        ),
        (
            ["workload.compile=true", "workload.num_warmup_steps=0"],
            "workload.compile=true compiles in the first warm-up step",
        ),
        (
            ["workload.compile=true", "strategy=zero3"],
            "workload.compile=true does not run under ZeRO-3",
        ),
    ],
)
def test_what_cannot_run_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as refused:
        job_of(*CPU, *overrides)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_which_layers_recompute_the_ranks_and_the_planner_agree():
    assert recomputed_layers("none", 2, 6) == []
    assert recomputed_layers("full", 2, 6) == [0, 1, 2, 3, 4, 5]
    assert recomputed_layers("selective", 2, 6) == [1, 3, 5]  # every 2nd, counted from 1
    assert recomputed_layers("selective", 4, 6) == [3]
    for mode, every, n in [
        ("none", 2, 6),
        ("full", 3, 5),
        ("selective", 2, 7),
        ("selective", 3, 8),
    ]:
        assert num_recomputed_layers(mode, every, n) == len(recomputed_layers(mode, every, n))


def test_checkpointed_layers_keep_their_input_and_one_working_set_beyond_the_loss_peak():
    per_layer, layer_input, layers = 100.0, 10.0, 8
    none = checkpointed_layer_terms(per_layer, layer_input, layers, 0, 1, loss_peak_bytes=30)
    assert none == {"activations_layers": 800.0}
    full = checkpointed_layer_terms(per_layer, layer_input, layers, 8, 1, loss_peak_bytes=30)
    assert full == {"activations_layers": 80.0, "activations_recompute": 70.0}
    mixed = checkpointed_layer_terms(per_layer, layer_input, layers, 4, 2, loss_peak_bytes=300)
    assert mixed == {"activations_layers": 2 * (400.0 + 40.0), "activations_recompute": 0.0}
    # one more forward of every layer: a third of 6N when attention is small
    assert recompute_flops_fraction(2.0, 10, 60.0) == pytest.approx(1 / 3)


def test_the_prediction_follows_the_mode_memory_down_and_time_up():
    shape = [*CPU, "world_size=2", "batch.micro_batch_size=8", "batch.seq_len=512"]
    preds = {
        mode: predict(job_of(*shape, "strategy=ddp", f"activation_checkpointing={mode}"))
        for mode in ("none", "selective", "full")
    }
    assert preds["full"].mem.total < preds["selective"].mem.total < preds["none"].mem.total
    steps = [preds[m].step_time_s for m in ("none", "selective", "full")]
    assert steps == sorted(steps) and steps[0] < steps[2] < 1.4 * steps[0]
    assert preds["full"].assumptions["activation_checkpointing"] == "full"
    # plan --recompute is full checkpointing
    recomputed = predict(job_of(*shape, "strategy=ddp"), recompute=True)
    assert recomputed.mem.total == pytest.approx(preds["full"].mem.total)
    assert recomputed.step_time_s == pytest.approx(preds["full"].step_time_s)


def test_the_8b_recipe_fits_an_h100_with_full_checkpointing_only():
    from distbench.tools.plan import make_plan, plan_json
    from distbench.tools.plan.render import PLAN_HEADERS, checkpointing_label

    plans = {
        mode: make_plan([*RECIPE_8B, f"activation_checkpointing={mode}"], ["fsdp"])
        for mode in ("none", "full")
    }
    (none,), (full,) = plans["none"].predictions, plans["full"].predictions
    assert none.fits is False and full.fits is True
    assert full.mem_needed_bytes / GIB < 80
    row = plan_json(plans["full"])[0]
    assert row["assumptions"]["activation_checkpointing"] == "full"
    assert "ckpt" in PLAN_HEADERS and checkpointing_label(full.assumptions) == "full"  # per row
    selective = {"activation_checkpointing": "selective", "activation_checkpointing_every": 3}
    assert checkpointing_label(selective) == "sel/3"


def test_search_checkpoints_only_where_memory_needs_it():
    from distbench.tools.plan import search_layouts
    from distbench.tools.plan.search import SEARCH_CHECKPOINTING, checkpointing_modes

    found = search_layouts([*RECIPE_1B_8K], micro_batches=(3,), history=False)
    labels = [label for label, _ in found.ranked]
    modes = {label: p.assumptions["activation_checkpointing"] for label, p in found.ranked}
    assert {"none", "selective", "full"} == set(modes.values())  # each where it is needed
    assert found.ranked[0][1].assumptions["activation_checkpointing"] == "none"  # fastest
    assert all(("ckpt=" in label) == (modes[label] != "none") for label in labels)
    # a layout that fits without checkpointing is not also ranked with it
    heads = [label.split(" ckpt=")[0].rsplit(" mb", 1)[0] for label in labels]
    assert len(heads) == len(set(heads))
    # an override (or --recompute) pins one mode
    assert checkpointing_modes(["activation_checkpointing=none"], False) == (None,)
    assert checkpointing_modes([], True) == ("full",)
    assert checkpointing_modes(["activation_checkpointing_every=3"], False) == SEARCH_CHECKPOINTING


def test_the_switch_on_a_real_tiny_model_recomputes_exactly_and_saves_less():
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from distbench.ranks.layers import checkpoint_layers, decoder_layer_slots

    config = LlamaConfig(
        vocab_size=128, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64,
    )  # fmt: skip
    tokens = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(0))

    def step(mode: str) -> tuple[float, float, torch.Tensor]:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).train()
        assert [p is model.model.layers for p, _ in decoder_layer_slots(model)] == [True] * 4
        assert checkpoint_layers(model, mode, 2) == len(recomputed_layers(mode, 2, 4))
        saved = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            saved.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(input_ids=tokens, labels=tokens, use_cache=False).loss
        loss.backward()
        return loss.item(), sum(saved), model.model.layers[0].mlp.up_proj.weight.grad

    none, selective, full = step("none"), step("selective"), step("full")
    assert none[0] == selective[0] == full[0]  # recompute is exact
    assert torch.equal(none[2], full[2])
    assert full[1] < selective[1] < none[1]  # autograd keeps less of checkpointed layers


def test_compile_phases_are_counted_in_the_step_that_compiles_and_a_recompile_is_named():
    import torch

    from distbench.ranks.layers import compile_events
    from distbench.workloads.train.workload import compile_note, compiles_per_step

    # aot_eager: dynamo and AOTAutograd as the ranks run them, without inductor's gcc build
    layer = torch.compile(torch.nn.Linear(8, 8), backend="aot_eager", dynamic=False)
    before = compile_events()
    layer(torch.randn(2, 8)).sum().backward()  # compiles forward and backward
    first = compile_events()
    layer(torch.randn(2, 8)).sum().backward()  # cached graphs
    cached = compile_events()
    layer(torch.randn(3, 8)).sum().backward()  # a new shape: a recompile
    assert first > before and cached == first and compile_events() > cached

    ranks = [{"compile_events_per_step": [40, 0, 3]}, {"compile_events_per_step": [38, 0, 0]}]
    assert compiles_per_step(ranks) == [40, 0, 3]
    assert compiles_per_step([{"step_times_s": [1.0]}]) == []
    assert compile_note([40, 0, 0], num_warmup=1) == {}
    note = compile_note([40, 0, 3], num_warmup=1)["compile_note"]
    assert note.startswith("timed step(s) 3 of 3 compiled")
