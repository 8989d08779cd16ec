"""Hydra's conventions (issue 14): run.py's own --help, the schema nodes out of the choices with a
one-line refusal, `distbench resolve` (the Job and DeepSpeed config, nothing launched) and
main()'s objective for sweeper plugins. The commands run for real as subprocesses (~1 s each).

    pytest tests/unit/test_hydra_conventions.py
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

import run
from distbench import engines
from distbench.compose.schema import SCHEMA_NODES
from distbench.engines.deepspeed import ds_config
from distbench.job import Job, resolve_job
from distbench.tracking.signature import run_signature
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config, config_options

pytestmark = pytest.mark.unit


def run_py(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(PROJECT_DIR / "run.py"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def distbench(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "distbench.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line_refusal(proc: subprocess.CompletedProcess) -> str:
    """The refusal's text, after checking it is one stderr line, exit 2, no traceback."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# ---------------------------------------------------------------- --help


def test_help_is_distbench_s_and_offers_only_real_options(tmp_path):
    proc = run_py("--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "powered by Hydra" not in text and "Powered by Hydra" not in text
    assert "base_" not in text and "schema" not in text
    for command in ("python run.py -m", "experiments=", "distbench resolve", "distbench plan"):
        assert command in text
    for command in ("distbench report", "distbench ui", "sync"):
        assert command in text
    section = text[text.index("== Config groups") : text.index("Plain keys:")].splitlines()[1:]
    groups = {line.split(":")[0] for line in section if line[:1].isalpha()}
    assert {
        "model",
        "strategy",
        "batch",
        "workload",
        "hardware",
        "tracking",
        "experiments",
    } <= groups
    assert "ds_zero" not in groups  # the plain key zero_stage picks conf/ds_zero/<stage>.yaml
    strategy_text = text[text.index("\nstrategy:") : text.index("\ntracking:")]
    for option in config_options("strategy"):
        assert option in strategy_text
    assert "[dp]" in strategy_text  # the current choice
    assert "strategy_grid" in text and "zero_stages" in text  # experiments/ (searchpath)
    assert "objective: throughput_tokens_per_s" in text  # $CONFIG


def test_help_marks_the_choices_the_overrides_make(tmp_path):
    proc = run_py("strategy=zero3", "hardware=h100_sxm", "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "[zero3]" in proc.stdout and "[h100_sxm]" in proc.stdout and "[dp]" not in proc.stdout


# ---------------------------------------------------------------- schema nodes


def test_schema_nodes_are_no_group_options_and_still_validate_every_option():
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    groups = [*SCHEMA_NODES, "strategy"]  # a strategy's schema is its engine's
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        offered = {group: loader.get_group_options(group) for group in groups}
    for group in groups:
        assert offered[group] == config_options(group)  # the YAML files, nothing else
        for option in offered[group]:
            cfg = compose_config([f"{group}={option}"])
            schema = (
                SCHEMA_NODES.get(group) or engines.get_spec(cfg.strategy.engine).strategy_schema
            )
            assert OmegaConf.get_type(cfg[group]) is schema, f"{group}={option}"


def test_a_yaml_option_is_typed_by_its_schema():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match=r"strategy\.tp=two"):
        compose_config(["strategy.tp=two"])


@pytest.mark.parametrize(
    "args",
    [
        ["strategy=base_strategy", "tracking=none"],
        ["model=base_model", "tracking=none"],
        ["-m", "strategy=dp,base_strategy", "tracking=none"],
        ["-m", "strategy=choice(dp,zero9)", "tracking=none"],
    ],
)
def test_a_schema_or_unknown_option_is_refused_in_one_line(tmp_path, args):
    line = one_line_refusal(run_py(*args, cwd=tmp_path))
    group = next(a for a in args if "=" in a).split("=")[0]
    assert line.startswith(f"distbench: invalid config: {group}=")
    assert "is not an option; choose one of" in line
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "multirun").exists()


def test_another_engines_strategy_field_is_refused_in_one_line(tmp_path):
    args = ("strategy=fsdp", "+strategy.offload_optimizer=cpu", "tracking=none")
    line = one_line_refusal(run_py(*args, cwd=tmp_path))
    assert line == (
        "distbench: invalid config: +strategy.offload_optimizer=cpu: "
        "Key 'offload_optimizer' not in 'TorchStrategyConfig'"
    )
    assert not (tmp_path / "outputs").exists()


def test_experiments_and_hydra_groups_pass_the_option_check(tmp_path):
    # experiments/ (on the searchpath) and Hydra's own groups are left to Hydra
    proc = run_py("--cfg", "job", "experiments=zero_stages", "hydra/help=default", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "objective:" in proc.stdout


# ---------------------------------------------------------------- distbench resolve


def test_resolve_shows_the_layout_the_hardware_peak_and_the_deepspeed_config(tmp_path):
    proc = distbench("resolve", "strategy=zero3", "world_size=4", "hardware=h100_sxm", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    header = proc.stdout.splitlines()[:3]
    assert "dp 4 x pp 1 x tp 1, ZeRO stage 3" in header[1]
    assert "peak fp32" in header[2] and "TFLOP/s" in header[2]
    tree, deepspeed = yaml.safe_load_all(proc.stdout)
    assert tree["layout"] == {"world_size": 4, "dp": 4, "tp": 1, "pp": 1, "zero_stage": 3}
    catalog = OmegaConf.load(CONF_DIR / "hardware" / "h100_sxm.yaml")
    assert tree["hardware"]["peak_tflops_bf16"] == catalog.peak_tflops_bf16 > 0
    assert deepspeed["zero_optimization"]["stage"] == 3
    # what the ranks pass to deepspeed.initialize: the same function on the same Job
    expected = ds_config(resolve_job(compose_config(["strategy=zero3", "world_size=4"]), CONF_DIR))
    assert deepspeed == expected
    assert deepspeed == ds_config(Job.from_tree(tree))


def test_resolve_json_and_a_torch_strategy_has_no_deepspeed_config(tmp_path):
    import json

    proc = distbench("resolve", "strategy=ddp", "world_size=2", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["deepspeed_config"] is None
    assert out["job"]["layout"]["dp"] == 2 and out["job"]["strategy"]["engine"] == "torch"
    proc = distbench("resolve", "strategy=tp", "world_size=4", "--json", cwd=tmp_path)
    out = json.loads(proc.stdout)
    assert out["deepspeed_config"]["tensor_parallel"] == {"autotp_size": 2}
    assert out["job"]["layout"]["dp"] == 2


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["world_size=3", "strategy=tp"], "world_size(3) is not divisible by tp(2)"),
        (["strategy=base_strategy"], "Could not find 'strategy/base_strategy'; choose one of"),
        (["world_size=abc"], "could not be converted to Integer"),
        (["strategy=dp,tp"], "Ambiguous value"),
        (["strategy=zero3", "zero_stage=1"], "pins zero_stage=3"),
    ],
)
def test_resolve_refuses_in_one_line(tmp_path, args, says):
    proc = distbench("resolve", *args, cwd=tmp_path)
    line = one_line_refusal(proc)
    assert line.startswith("distbench: resolve: ") and says in line
    assert proc.stdout == ""


# ---------------------------------------------------------------- main()'s objective


def outcome(status: str, **metrics: float) -> dict:
    return {"status": status, "metrics": metrics}


def test_objective_direction_follows_the_metric():
    for metric in ("throughput_tokens_per_s", "mfu_pct", "tflops_per_device", "busbw_gbps_peak.x"):
        assert run.objective_goal(metric) == "max", metric
        assert run.worst_value(metric) == 0.0
    lower = ("step_time_s_p50", "peak_mem_gib", "cost_usd_per_1m_tokens", "latency_s_p50")
    lower += ("pred_comm_bytes_per_step", "mem_per_rank_gib_sharded")  # "per", yet not rates
    for metric in lower:
        assert run.objective_goal(metric) == "min", metric
        assert run.worst_value(metric) == run.WORST_LOWER_IS_BETTER
        assert math.isfinite(run.worst_value(metric))


def test_objective_value_of_outcomes(capsys):
    finished = outcome("FINISHED", throughput_tokens_per_s=1234.5, step_time_s_p50=0.25)
    assert run.objective_value(finished, "throughput_tokens_per_s") == 1234.5
    assert run.objective_value(finished, "step_time_s_p50") == 0.25
    failed = {"status": "FAILED", "failure_kind": "oom", "metrics": {}}
    assert run.objective_value(failed, "throughput_tokens_per_s") == 0.0
    assert run.objective_value(failed, "step_time_s_p50") == 1e9
    refused = {"status": "FAILED", "failure_kind": "invalid_config"}  # no metrics at all
    assert run.objective_value(refused, "peak_mem_gib") == 1e9
    partial = outcome("FAILED", throughput_tokens_per_s=99.0)  # a failed job's figures: no
    assert run.objective_value(partial, "throughput_tokens_per_s") == 0.0
    skipped = {**finished, "status": "SKIPPED", "previous_status": "FINISHED"}
    assert run.objective_value(skipped, "throughput_tokens_per_s") == 1234.5
    skipped_failed = {**finished, "status": "SKIPPED", "previous_status": "FAILED"}
    assert run.objective_value(skipped_failed, "step_time_s_p50") == 1e9
    nan = outcome("FINISHED", mfu_pct=float("nan"))
    assert run.objective_value(nan, "mfu_pct") == 0.0
    capsys.readouterr()
    assert run.objective_value(finished, "througput") == 0.0  # a typo: worst, and said
    assert "objective=througput is not a metric of this job" in capsys.readouterr().out
    # A single run or a grid sweep: no sampler reads the value, nothing to say.
    assert run.objective_value(finished, "througput", warn=False) == 0.0
    assert capsys.readouterr().out == ""


def test_objective_is_a_config_key_outside_the_signature():
    plain = compose_config(["strategy=zero3", "world_size=4"])
    other = compose_config(["strategy=zero3", "world_size=4", "objective=step_time_s_p50"])
    assert plain.objective == "throughput_tokens_per_s"
    trees = [resolve_job(cfg, CONF_DIR).tree() for cfg in (plain, other)]
    assert run_signature(trees[0]) == run_signature(trees[1])
    without = {k: v for k, v in trees[0].items() if k != "objective"}
    assert run_signature(without) == run_signature(trees[0])  # runs recorded before it existed
