"""The torch engine's vocab-parallel embedding and LM head (`strategy.vocab_parallel`), without
launching ranks: the key (resolve, refusal, signature) and what the planner does with it (the
head's parameters, logits, compute and communication over tp). Real ranks run it in
tests/distributed/test_torch_engine.py (torch_tp and 3d equal single; a tied table split).

    python -m pytest tests/unit/test_vocab_parallel.py -q
"""

from __future__ import annotations

import pytest

from distbench.compose.schema import ConfigError
from distbench.engines.torch_native import vocab_parallel
from distbench.figures.activations import (
    LOSS_PARALLEL_PEAK_BYTES_PER_LOGIT,
    LOSS_PEAK_BYTES_PER_LOGIT,
)
from distbench.figures.communication import ring_all_reduce_bytes
from distbench.figures.predict import predict
from distbench.job import resolve_job
from distbench.tracking.signature import run_signature
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

# An 8B on 8 H100s with tp 8: the head is 525M of its 8.0B parameters, its logits (128k
# vocabulary) the largest activation.
TP8 = ["model=llama3_8b", "world_size=8", "hardware=h100_sxm", "workload.dtype=bf16"]
TP8 += ["strategy=torch_tp", "strategy.tp=8", "activation_checkpointing=full"]
TP8 += ["batch.micro_batch_size=1", "batch.grad_accum_steps=1", "batch.seq_len=4096"]


def job_of(*overrides: str):
    return resolve_job(compose_config(list(overrides)), CONF_DIR)


def test_on_by_default_under_torch_tp_only():
    assert vocab_parallel(job_of("strategy=torch_tp", "world_size=2"))
    assert not vocab_parallel(job_of("strategy=torch_tp", "strategy.vocab_parallel=false"))
    assert not vocab_parallel(job_of("strategy=ddp", "world_size=2"))  # tp 1
    assert not vocab_parallel(job_of("strategy=tp", "world_size=2"))  # DeepSpeed's AutoTP


def test_a_vocabulary_tp_does_not_divide_is_refused_in_one_line():
    with pytest.raises(ConfigError) as refused:
        job_of("strategy=torch_tp", "world_size=2", "model.vocab_size=8191")
    message = str(refused.value)
    assert "model.vocab_size(8191) is not divisible by tp(2)" in message
    assert "strategy.vocab_parallel=false" in message and "\n" not in message
    job_of(
        "strategy=torch_tp",
        "world_size=2",
        "model.vocab_size=8191",
        "strategy.vocab_parallel=false",
    )


def test_the_signature_changes_only_where_the_vocabulary_is_split():
    """Every torch run before the key replicated the head: a split one measures something else
    (a new signature), an unsplit one (tp 1, or vocab_parallel=false) keeps its old one."""

    def without_key(tree):
        return {
            **tree,
            "strategy": {k: v for k, v in tree["strategy"].items() if k != "vocab_parallel"},
        }

    split = job_of("strategy=torch_tp", "world_size=2").tree()
    whole = job_of("strategy=torch_tp", "world_size=2", "strategy.vocab_parallel=false").tree()
    ddp = job_of("strategy=ddp", "world_size=2").tree()
    assert split["strategy"]["vocab_parallel"] is True  # a param of the run
    assert run_signature(split) != run_signature(without_key(split))
    assert (
        run_signature(whole)
        == run_signature(without_key(whole))
        == run_signature(without_key(split))
    )
    assert run_signature(ddp) == run_signature(without_key(ddp))


def test_the_planner_splits_the_head_its_logits_and_its_compute_over_tp():
    split, whole = predict(job_of(*TP8)), predict(job_of(*TP8, "strategy.vocab_parallel=false"))
    tp, seq, vocab, hidden = 8, 4096, 128256, 4096
    head_params = vocab * hidden  # untied: the embedding is as large, on the same device
    # fp32 params, grads and two Adam moments (16 B each) of 7/8 of embedding + head, less
    mem_states = sum(split.mem.terms[k] for k in ("params_fp32", "grads_fp32"))
    mem_states_whole = sum(whole.mem.terms[k] for k in ("params_fp32", "grads_fp32"))
    assert mem_states_whole - mem_states == pytest.approx(
        8 * 2 * head_params * (1 - 1 / tp), rel=1e-3
    )
    assert whole.mem.terms["activations_logits"] == pytest.approx(
        seq * vocab * LOSS_PEAK_BYTES_PER_LOGIT
    )
    # its vocabulary slice, through loss_parallel's decomposed log-softmax
    assert split.mem.terms["activations_logits"] == pytest.approx(
        seq * vocab / tp * LOSS_PARALLEL_PEAK_BYTES_PER_LOGIT
    )
    # the head's 6·V·h FLOPs per token run 1/tp on each device
    head_flops = 6 * (head_params + hidden)  # + the final norm, counted with the head
    assert whole.time_s["compute"] > split.time_s["compute"]
    ratio = whole.time_s["compute"] / split.time_s["compute"]
    layers_flops = split.flops_per_token - head_flops
    assert ratio > 1 + 0.8 * head_flops * (1 - 1 / tp) / (layers_flops / tp + head_flops / tp)
    # two more all-reduces of b·s·h per micro-batch: the embedding's output, the head's input grad
    extra = 2 * ring_all_reduce_bytes(seq * hidden * 2, tp)
    assert split.comm_bytes["tp"] - whole.comm_bytes["tp"] == pytest.approx(extra)
    assert split.mem.total < whole.mem.total and split.step_time_s < whole.step_time_s
    assert (split.assumptions["vocab_parallel"], whole.assumptions["vocab_parallel"]) == (
        True,
        False,
    )  # what plan --json says each row assumed
    assert split.assumptions["sequence_parallel"] is False


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["strategy.vocab_parallel=false"],
            "strategy.sequence_parallel=true needs strategy.vocab_parallel=true",
        ),
        (
            ["strategy=3d", "world_size=8"],
            "strategy.sequence_parallel=true is not built under pp(2)",
        ),
        (["batch.seq_len=127"], "batch.seq_len(127) is not divisible by tp(2)"),
    ],
    ids=["without-vocab-parallel", "under-pp", "uneven-sequence"],
)
def test_what_sequence_parallel_cannot_run_is_refused_in_one_line(overrides, message):
    base = ["strategy=torch_tp", "world_size=2", "strategy.sequence_parallel=true"]
    with pytest.raises(ConfigError) as refused:
        job_of(*base, *overrides)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_sequence_parallel_splits_the_norms_and_checkpointed_inputs_and_is_hashed_when_on():
    from distbench.figures.activations import HF_SAVED_ELEMENTS, layer_input_bytes

    for mode, layer_key in (("full", "activations_layers"), ("none", "activations_layers")):
        sliced, whole = (
            predict(job_of(*TP8, f"activation_checkpointing={mode}", *extra))
            for extra in (["strategy.sequence_parallel=true"], [])
        )
        tp, seq, hidden, layers = 8, 4096, 4096, 32
        if mode == "full":  # each layer keeps its input: its sequence slice
            one = layer_input_bytes(seq, 1, hidden, 2)
            assert whole.mem.terms[layer_key] == pytest.approx(layers * one)
            assert sliced.mem.terms[layer_key] == pytest.approx(layers * one / tp)
        else:  # the norms' saved tensors: their slice; the rest as TP splits it
            norms = HF_SAVED_ELEMENTS["llama"][2] * hidden * seq * 2 * layers
            saved = whole.mem.terms[layer_key] - sliced.mem.terms[layer_key]
            assert saved == pytest.approx(norms * (1 - 1 / tp))
        # one all-reduce's bytes more per layer per micro-batch (gathers and reduce-scatters)
        extra = layers * ring_all_reduce_bytes(seq * hidden * 2, tp)
        assert sliced.comm_bytes["tp"] - whole.comm_bytes["tp"] == pytest.approx(extra)
    on = job_of("strategy=torch_tp", "world_size=2", "strategy.sequence_parallel=true").tree()
    off = job_of("strategy=torch_tp", "world_size=2").tree()
    assert off["strategy"]["sequence_parallel"] is False
    assert run_signature(on) != run_signature(off)
    without = {
        **off,
        "strategy": {k: v for k, v in off["strategy"].items() if k != "sequence_parallel"},
    }
    assert run_signature(off) == run_signature(without)  # the runs before the key keep theirs


def test_the_search_tries_sequence_parallel_before_checkpointing_on_torch_tp():
    from omegaconf import OmegaConf

    from distbench.tools.plan import search_layouts
    from distbench.tools.plan.search import memory_savers

    torch_tp = OmegaConf.create({"strategy": {"engine": "torch", "tp": 2, "pp": 1}})
    modes = ("none", "selective", "full")
    assert memory_savers(torch_tp, modes, []) == [
        ("none", False), ("none", True), ("selective", False),
        ("selective", True), ("full", False), ("full", True),
    ]  # fmt: skip
    pinned = ["strategy.sequence_parallel=false"]
    assert memory_savers(torch_tp, modes, pinned) == [(m, False) for m in modes]
    for engine, tp, pp in (("deepspeed", 2, 1), ("torch", 1, 1), ("torch", 2, 2)):
        other = OmegaConf.create({"strategy": {"engine": engine, "tp": tp, "pp": pp}})
        assert memory_savers(other, modes, []) == [(m, False) for m in modes]
    # the 8B recipe at 2 × 8192 tokens on 8 H100s: some TP layouts fit without checkpointing
    # only sliced; each is ranked once, sliced, and not also with a recompute
    recipe = ["model=llama3_8b", "world_size=8", "hardware=h100_sxm", "workload.dtype=bf16"]
    recipe += ["batch.grad_accum_steps=1", "batch.seq_len=8192"]
    found = search_layouts(recipe, micro_batches=(2,), history=False)
    labels = [label for label, _ in found.ranked]
    sliced = [label for label in labels if " sp " in label and "ckpt=" not in label]
    assert sliced, labels
    for label in sliced:
        head = label.replace(" sp", "").rsplit(" mb", 1)[0]
        assert not [x for x in labels if x.replace(" sp", "").startswith(head) and x != label]
        assert " tp1 " not in label and " pp1 " in label
    unsliced = search_layouts([*recipe, *pinned], micro_batches=(2,), history=False)
    assert not any(" sp " in label for label, _ in unsliced.ranked)
    # a torch-only key pinned: DeepSpeed's layouts are refused with the reason, not the search
    assert unsliced.refused["deepspeed dp"] == (
        "Could not override 'strategy.sequence_parallel': "
        "Key 'sequence_parallel' not in 'DeepSpeedStrategyConfig'"
    )


def test_a_plan_refuses_the_rows_whose_engine_lacks_an_overridden_key_and_plans_the_rest():
    from distbench.tools.plan import make_plan

    overrides = ["world_size=2", "strategy.sequence_parallel=true", "hardware=cpu"]
    plan = make_plan([*overrides, "hardware.time_source=efficiency"], ["torch_tp", "tp"])
    assert [p.strategy for p in plan.predictions] == ["torch_tp"]
    assert plan.refused["tp"] == (
        "Could not override 'strategy.sequence_parallel': "
        "Key 'sequence_parallel' not in 'DeepSpeedStrategyConfig'"
    )
    assert plan.recommendation == "torch_tp"


def test_a_strategy_key_no_engine_has_still_stops_the_plan():
    from hydra.errors import ConfigCompositionException

    from distbench.tools.plan import make_plan

    overrides = ["world_size=2", "strategy.sequence_paralel=true", "hardware=cpu"]
    with pytest.raises(ConfigCompositionException, match="sequence_paralel"):
        make_plan(overrides, ["torch_tp", "tp"])
