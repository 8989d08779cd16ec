"""Every config option composes and resolves into a Job; bad input is refused with the numbers
in it."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from distbench.compose.schema import ConfigError
from distbench.job import Layout, resolve_job
from tests.conftest import CONF_DIR, compose_config, config_options

pytestmark = pytest.mark.unit


def layout_of(overrides: list[str] | None = None) -> Layout:
    return resolve_job(compose_config(overrides), CONF_DIR).layout


@pytest.mark.parametrize(
    "group", ["model", "strategy", "batch", "workload", "hardware", "tracking"]
)
def test_every_option_of_every_group_composes(group):
    options = config_options(group)
    assert options, f"conf/{group}/ has no options"
    for option in options:
        cfg = compose_config([f"{group}={option}"])
        OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves


# The keys only one workload's job carries (its own node).
OPTION_KEYS = {"gemm", "collectives", "inference"}


@pytest.mark.parametrize("workload", config_options("workload"))
def test_every_workload_option_resolves_into_a_job_with_only_its_own_node(workload):
    job = resolve_job(compose_config([f"workload={workload}"]), CONF_DIR)
    tree = job.tree()
    assert job.workload.name == workload and tree["workload"]["name"] == workload
    own = {job.spec.options_key} - {None}
    assert OPTION_KEYS & set(tree) == own
    assert ("model" in tree) == ("strategy" in tree) == ("batch" in tree) == job.builds_model


def test_a_training_job_has_no_gemm_collectives_or_inference_keys():
    tree = resolve_job(compose_config(["workload=train"]), CONF_DIR).tree()
    assert not OPTION_KEYS & set(tree)
    assert {"model", "strategy", "batch", "zero_optimization"} <= set(tree)


def test_a_gemm_job_has_its_gemm_node_and_no_model():
    tree = resolve_job(compose_config(["workload=gemm", "gemm.m=1024"]), CONF_DIR).tree()
    assert tree["gemm"]["m"] == 1024
    assert not {"collectives", "inference", "model", "strategy", "batch"} & set(tree)
    assert tree["zero_stage"] is None and tree["layout"]["zero_stage"] is None


# The smallest world each strategy runs on where it is not the default world_size=2.
SMALLEST_WORLD = {"single": 1, "3d": 4}


@pytest.mark.parametrize("strategy", config_options("strategy"))
def test_every_strategy_validates_on_its_smallest_world(strategy):
    world_size = SMALLEST_WORLD.get(strategy, 2)
    cfg = compose_config([f"strategy={strategy}", f"world_size={world_size}"])
    layout = resolve_job(cfg, CONF_DIR).layout
    assert layout.dp * layout.tp * layout.pp == cfg.world_size == world_size
    # ZeRO is DeepSpeed's: a torch strategy has no stage at all (not stage 0)
    assert (layout.zero_stage is None) == (cfg.strategy.engine == "torch")


@pytest.mark.parametrize("model", ["gpt2_124m", "llama_1b", "llama3_8b", "llama2_13b"])
def test_big_models_validate_on_gpus(model):
    layout = layout_of(
        [
            f"model={model}",
            "strategy=zero3",
            "world_size=8",
            "hardware=h100_sxm",
            "batch=medium",
        ]
    )
    assert (layout.dp, layout.zero_stage) == (8, 3)


def test_experiments_compose():
    experiments = sorted((CONF_DIR.parent / "experiments").glob("*.yaml"))
    assert experiments
    for path in experiments:
        cfg = compose_config([f"experiments={path.stem}"])
        resolve_job(cfg, CONF_DIR)


def test_default_is_tiny_dp_on_two_ranks():
    cfg = compose_config()
    layout = resolve_job(cfg, CONF_DIR).layout
    assert (cfg.model.name, cfg.strategy.name, layout.world_size, layout.dp, layout.zero_stage) == (
        "tiny",
        "dp",
        2,
        2,
        0,
    )


def test_rest_of_ranks_goes_to_dp():
    layout = layout_of(["strategy=tp", "world_size=4"])
    assert (layout.dp, layout.tp, layout.pp) == (2, 2, 1)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_stage_group_sets_stage_under_dp(stage):
    cfg = compose_config(["strategy=dp", f"zero_stage={stage}"])
    assert resolve_job(cfg, CONF_DIR).layout.zero_stage == stage


def test_strategy_pins_its_stage():
    assert layout_of(["strategy=zero3"]).zero_stage == 3
    assert layout_of(["strategy=zero3", "zero_stage=3"]).zero_stage == 3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["strategy=tp", "world_size=3"], "world_size(3) is not divisible by tp(2) * pp(1)"),
        (
            ["strategy=dp", "strategy.dp=3", "world_size=4"],
            "dp(3) * tp(1) * pp(1) != world_size(4)",
        ),
        (["strategy=zero3", "zero_stage=1"], "strategy=zero3 pins zero_stage=3 but zero_stage=1"),
        (["strategy=pp", "zero_stage=2"], "runs with zero_stage 0 or 1 only, got zero_stage=2"),
        (
            ["strategy=tp", "strategy.tp=8", "world_size=8"],
            "model.num_kv_heads(4) is not divisible by tp(8)",
        ),
        (["strategy=pp", "strategy.pp=8", "world_size=8"], "model.num_layers(4) < pp(8)"),
        (
            ["strategy=pp", "strategy.pp=3", "world_size=3"],
            "model.num_layers(4) is not divisible by pp(3)",
        ),
        (["batch.seq_len=4096"], "batch.seq_len(4096) > model.max_position_embeddings(1024)"),
        (["batch.micro_batch_size=0"], "batch.micro_batch_size=0 must be >= 1"),
        (["world_size=0"], "world_size=0 must be >= 1"),
        (["strategy.engine=megatron"], "strategy.engine='megatron' is not allowed"),
        (["workload.dtype=fp8"], "workload.dtype='fp8' is not allowed"),
        (["hardware=cpu", "workload.dtype=fp16"], "workload.dtype='fp16' does not run on CPU"),
        (["model.pretrained_path=/no/such/dir"], "model.pretrained_path='/no/such/dir'"),
        (["strategy=dp", "strategy.offload_param=cpu"], "offload_param needs zero_stage=3"),
        (["workload.profile_steps=-1"], "workload.profile_steps=-1 must be >= 0"),
        (["hardware.time_source=fitted"], "hardware.time_source='fitted' is not allowed"),
    ],
)
def test_refusals_name_the_bad_value(overrides, message):
    with pytest.raises(ConfigError) as err:
        resolve_job(compose_config(overrides), CONF_DIR)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("limits.timeout_s=nan", "limits.timeout_s=nan must be a finite number > 0"),
        ("limits.stall_timeout_s=inf", "limits.stall_timeout_s=inf must be a finite number > 0"),
        ("workload.lr=-1", "workload.lr=-1.0 must be a finite number > 0"),
        ("workload.lr=nan", "workload.lr=nan must be a finite number > 0"),
    ],
)
def test_non_finite_times_and_a_negative_lr_are_refused_in_one_line(override, message):
    with pytest.raises(ConfigError) as err:
        resolve_job(compose_config([override]), CONF_DIR)
    assert str(err.value) == message


def test_an_unknown_workload_name_lists_the_registry():
    with pytest.raises(ConfigError) as err:
        resolve_job(compose_config(["workload.name=nbody"]), CONF_DIR)
    assert str(err.value) == (
        f"workload='nbody' is not allowed; choose one of {config_options('workload')}"
    )
