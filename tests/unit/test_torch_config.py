"""The torch engine's strategies resolve into a Job where they can run and are refused, in one
line with the numbers, where they cannot; every engine registers its module and its strategy
schema, and another engine's strategy field is refused when the config is composed."""

from __future__ import annotations

import dataclasses

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from distbench import engines
from distbench.compose.overrides import refuse_overrides
from distbench.compose.schema import ConfigError, StrategyConfig
from distbench.engines import GRID_DIMS, get
from distbench.job import Job, Layout, baseline_on_one_device, resolve_job
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

TORCH_STRATEGIES = ["single", "ddp", "fsdp", "torch_tp", "torch_pp", "3d"]


def layout_of(overrides: list[str]) -> Layout:
    return resolve_job(compose_config(overrides), CONF_DIR).layout


def test_every_engine_has_a_module_and_a_strategy_schema():
    specs = engines.registry()
    assert {"deepspeed", "torch"} <= set(specs)
    for name in TORCH_STRATEGIES:
        cfg = compose_config([f"strategy={name}"])
        assert cfg.strategy.engine == "torch"
        assert OmegaConf.get_type(cfg.strategy) is specs["torch"].strategy_schema
    for engine, spec in specs.items():
        assert get(engine).__name__ == spec.module and get(engine).SPEC is spec
        assert callable(get(engine).check) and callable(get(engine).resolve_zero_stage)
        assert issubclass(spec.strategy_schema, StrategyConfig)
    with pytest.raises(ConfigError, match=r"strategy.engine='jax' is not allowed; choose one of"):
        engines.get_spec("jax")


def test_a_strategy_reads_the_other_engines_fields_as_unused():
    # figures/ and plan read every strategy's fields by name: the base class answers for the
    # fields its engine does not have, and Job.tree() (resolved.yaml, params) holds its own only
    fsdp = resolve_job(compose_config(["strategy=fsdp"]), CONF_DIR)
    assert (fsdp.strategy.data_parallel, fsdp.strategy.offload_optimizer) == ("fsdp", "none")
    assert (fsdp.strategy.zero_stage, fsdp.strategy.default_zero_stage) == (None, 0)
    assert "offload_param" not in fsdp.tree()["strategy"]
    zero3 = resolve_job(compose_config(["strategy=zero3_offload"]), CONF_DIR)
    assert (zero3.strategy.data_parallel, zero3.strategy.pp_schedule) == (None, None)
    assert zero3.strategy.offload_param == "cpu" and "data_parallel" not in zero3.tree()["strategy"]
    for job in (fsdp, zero3):
        assert Job.from_tree(job.tree()) == job  # the rank rebuilds the engine's schema
        names = {f.name for f in dataclasses.fields(job.strategy)}
        assert names == set(job.tree()["strategy"])


def test_an_older_resolved_yaml_with_every_engines_fields_still_loads():
    # resolved.yaml written when one schema held both engines' fields: the other engine's
    # fields at their unused value are dropped; a value that would change the run is refused
    job = resolve_job(compose_config(["strategy=zero3"]), CONF_DIR)
    tree = job.tree()
    tree["strategy"].update(data_parallel=None, pp_schedule=None)
    assert Job.from_tree(tree) == job
    tree["strategy"]["data_parallel"] = "fsdp"
    with pytest.raises(ConfigError, match="DeepSpeedStrategyConfig has no key 'data_parallel'"):
        Job.from_tree(tree)


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (
            ["strategy=fsdp", "strategy.offload_optimizer=cpu"],
            "strategy.offload_optimizer=cpu: Key 'offload_optimizer' not in 'TorchStrategyConfig'",
        ),
        (
            ["strategy=fsdp", "+strategy.offload_optimizer=cpu"],
            "+strategy.offload_optimizer=cpu: Key 'offload_optimizer' not in 'TorchStrategyConfig'",
        ),
        (
            ["strategy=ddp", "strategy.zero_stage=2"],
            "Key 'zero_stage' not in 'TorchStrategyConfig'",
        ),
        (
            ["strategy=dp", "strategy.data_parallel=fsdp"],
            "strategy.data_parallel=fsdp: Key 'data_parallel' not in 'DeepSpeedStrategyConfig'",
        ),
        (
            ["strategy=pp", "++strategy.pp_schedule=gpipe"],
            "Key 'pp_schedule' not in 'DeepSpeedStrategyConfig'",
        ),
        (
            ["-m", "strategy=dp,fsdp", "strategy.offload_optimizer=cpu"],
            "strategy.offload_optimizer=cpu: Key 'offload_optimizer' not in 'TorchStrategyConfig' "
            "(with strategy=fsdp)",
        ),
    ],
)
def test_another_engines_field_is_refused_when_composed(argv, refusal):
    message = refuse_overrides(argv, CONF_DIR)
    assert message is not None and "\n" not in message
    assert message.endswith(refusal) and message.split(":")[0] in argv
    if argv[0] != "-m" and not argv[1].startswith("+"):  # Hydra itself refuses it
        with pytest.raises(ConfigCompositionException):
            compose_config(argv)


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
        # deepspeed: TP × PP is refused (the torch engine's fields when composed, above)
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
