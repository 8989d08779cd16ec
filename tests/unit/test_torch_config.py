"""The torch engine's strategies resolve into a Job where they can run and are refused, in one
line with the numbers, where they cannot; the engine registry matches config.ENGINES."""

from __future__ import annotations

import pytest

from distbench.compose.schema import ENGINES, ConfigError
from distbench.engines import ENGINE_MODULES, GRID_DIMS, get
from distbench.job import Layout, baseline_on_one_device, resolve_job
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

TORCH_STRATEGIES = ["single", "ddp", "fsdp", "torch_tp", "torch_pp", "3d"]


def layout_of(overrides: list[str]) -> Layout:
    return resolve_job(compose_config(overrides), CONF_DIR).layout


def test_every_engine_has_a_module():
    assert set(ENGINES) == set(ENGINE_MODULES)
    for name in TORCH_STRATEGIES:
        assert compose_config([f"strategy={name}"]).strategy.engine == "torch"
    for engine, module in ENGINE_MODULES.items():
        assert get(engine).__name__ == module
        assert callable(get(engine).check) and callable(get(engine).resolve_zero_stage)


@pytest.mark.parametrize(
    ("overrides", "degrees"),
    [
        (["strategy=single", "world_size=1"], (1, 1, 1)),
        (["strategy=ddp", "world_size=4"], (4, 1, 1)),
        (["strategy=fsdp", "world_size=2"], (2, 1, 1)),
        (["strategy=torch_tp", "world_size=4"], (2, 1, 2)),
        (["strategy=torch_tp", "strategy.tp=4", "world_size=4"], (1, 1, 4)),
        (["strategy=torch_pp", "world_size=4", "strategy.pp_schedule=1f1b"], (2, 2, 1)),
        (["strategy=3d", "world_size=8"], (2, 2, 2)),
        (["strategy=ddp", "strategy.tp=2", "strategy.pp=2", "world_size=8"], (2, 2, 2)),
        (["strategy=fsdp", "strategy.tp=2", "world_size=4"], (2, 1, 2)),
    ],
)
def test_torch_layouts_resolve(overrides, degrees):
    layout = layout_of(overrides)
    assert (layout.dp, layout.pp, layout.tp) == degrees
    assert layout.zero_stage is None and layout.tag == "none"  # ZeRO is DeepSpeed's


def test_single_in_a_wider_sweep_runs_on_one_device():
    cfg = compose_config(["strategy=single", "world_size=4"])
    pinned, requested = baseline_on_one_device(cfg)
    assert (pinned.world_size, requested, cfg.world_size) == (1, 4, 4)  # the original untouched
    assert resolve_job(pinned, CONF_DIR).layout.dp == 1
    ddp = compose_config(["strategy=ddp", "world_size=4"])
    assert baseline_on_one_device(ddp) == (ddp, None)
    # resolve_job pins it itself and remembers the world_size the sweep asked for
    job = resolve_job(cfg, CONF_DIR)
    assert (job.world_size, job.layout.dp, job.world_size_requested) == (1, 1, 4)
    assert job.tree()["world_size_requested"] == 4 and cfg.world_size == 4


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["strategy=ddp", "zero_stage=2"],
            "strategy=ddp has no ZeRO stage (zero_stage=2 given); ZeRO is the deepspeed "
            "engine's (fsdp shards like ZeRO-3)",
        ),
        (["strategy=fsdp", "zero_stage=0"], "strategy=fsdp has no ZeRO stage (zero_stage=0"),
        (["strategy=ddp", "strategy.offload_optimizer=cpu"], "strategy=ddp has no offload"),
        (["strategy=ddp", "strategy.data_parallel=zero"], "strategy.data_parallel='zero'"),
        (["strategy=torch_pp", "strategy.pp_schedule=zb"], "strategy.pp_schedule='zb'"),
        (
            ["strategy=torch_tp", "strategy.tp=8", "world_size=8"],
            "model.num_kv_heads(4) is not divisible by tp(8)",
        ),
        (
            [
                "strategy=torch_tp",
                "model.hidden_size=240",
                "model.num_heads=3",
                "model.num_kv_heads=3",
            ],
            "model.num_heads(3) is not divisible by tp(2)",
        ),
        (
            ["strategy=torch_tp", "model.intermediate_size=687"],
            "model.intermediate_size(687) is not divisible by tp(2)",
        ),
        (["strategy=torch_tp", "model=gpt2_124m"], "model.family=gpt2 is not llama"),
        (
            ["strategy=torch_pp", "strategy.pp=3", "world_size=3"],
            "model.num_layers(4) is not divisible by pp(3)",
        ),
        (
            ["strategy=torch_pp", "strategy.pp=4", "world_size=4", "strategy.pp_schedule=1f1b"],
            "strategy.pp_schedule=1f1b needs batch.grad_accum_steps(2) >= pp(4) micro-batches",
        ),
        (["strategy=torch_pp", "model=gpt2_124m"], "model.tie_word_embeddings=true cannot be"),
        (["strategy=3d", "world_size=6"], "world_size(6) is not divisible by tp(2) * pp(2)"),
        # deepspeed: the torch engine's fields, and TP × PP, are refused
        (["strategy=dp", "strategy.data_parallel=fsdp"], "strategy.data_parallel='fsdp' is"),
        (["strategy=pp", "strategy.pp_schedule=gpipe"], "strategy.pp_schedule='gpipe' is the"),
        (
            ["strategy=tp", "strategy.pp=2", "world_size=4"],
            "tp(2) with pp(2) is not supported by the deepspeed engine",
        ),
    ],
)
def test_torch_refusals_name_the_numbers(overrides, message):
    with pytest.raises(ConfigError) as err:
        resolve_job(compose_config(overrides), CONF_DIR)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_combine_writes_the_rank_grid():
    from distbench.workloads.train.workload import combine

    ranks = [
        {"step_times_s": [1.0], "losses": [2.0], "coords": dict(zip(GRID_DIMS, c, strict=True))}
        for c in [(0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 1)]
    ]
    result = combine(ranks)
    assert result["grid"]["shape"] == [2, 1, 2]
    assert result["grid"]["coords"][3] == [1, 0, 1]
    assert result["layout_tag"] == "dp2-pp1-tp2"
