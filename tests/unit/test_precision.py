"""One precision recipe on both engines: its names, the DeepSpeed block it writes, and the
recipes an engine refuses (issue 12).

    python -m pytest tests/unit/test_precision.py -q
"""

from __future__ import annotations

import pytest

from distbench.compose.schema import ConfigError
from distbench.engines.deepspeed import ds_config
from distbench.job import resolve_job
from distbench.precision import adamw_kwargs, precision_tag, weights_dtype
from tests.conftest import CONF_DIR, compose_config


def job_of(*overrides):
    return resolve_job(compose_config(["model=tiny", "hardware=h100_sxm", *overrides]), CONF_DIR)


@pytest.mark.parametrize(
    ("dtype", "precision", "tag", "weights"),
    [
        ("fp32", "mixed", "fp32", "fp32"),
        ("fp32", "pure", "fp32", "fp32"),
        ("bf16", "mixed", "bf16-mixed", "fp32"),
        ("bf16", "pure", "bf16-pure", "bf16"),
        ("fp16", "mixed", "fp16-mixed", "fp32"),
    ],
)
def test_recipe_names_and_master_weights(dtype, precision, tag, weights):
    assert precision_tag(dtype, precision) == tag
    assert weights_dtype(dtype, precision) == weights


def test_the_default_bf16_is_mixed_on_both_engines():
    for strategy in ("ddp", "dp", "fsdp", "zero3"):
        job = job_of(f"strategy={strategy}", "world_size=2", "workload.dtype=bf16")
        assert job.precision == "bf16-mixed" and job.weights_dtype == "fp32"
        assert job.optimizer_impl == "fused"


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_deepspeed_bf16_reduces_gradients_in_fp32(stage):
    job = job_of("strategy=dp", f"zero_stage={stage}", "world_size=2", "workload.dtype=bf16")
    config = ds_config(job)
    assert config["bf16"] == {"enabled": True}
    assert config["communication_data_type"] == "fp32"
    if stage == 1:  # DeepSpeed's BF16_Optimizer: fp32 accumulation
        assert config["data_types"] == {"grad_accum_dtype": "fp32"}
    fp32 = ds_config(job_of("strategy=dp", f"zero_stage={stage}", "world_size=2"))
    assert "communication_data_type" not in fp32 and "data_types" not in fp32


def test_pure_bf16_is_refused_on_deepspeed_with_the_reason():
    with pytest.raises(ConfigError, match=r"workload.precision=pure .*DeepSpeed.*fp32 master"):
        job_of("strategy=zero2", "world_size=2", "workload.dtype=bf16", "workload.precision=pure")
    job = job_of("strategy=ddp", "world_size=2", "workload.dtype=bf16", "workload.precision=pure")
    assert job.precision == "bf16-pure" and job.weights_dtype == "bf16"


def test_fp16_mixed_is_refused_on_the_torch_engine_and_bad_names_are_named():
    with pytest.raises(ConfigError, match="loss scaling"):
        job_of("strategy=ddp", "world_size=2", "workload.dtype=fp16")
    with pytest.raises(ConfigError, match=r"workload.precision='amp' is not allowed"):
        job_of("strategy=ddp", "world_size=2", "workload.precision=amp")
    with pytest.raises(ConfigError, match=r"workload.optimizer_impl='apex'"):
        job_of("strategy=ddp", "world_size=2", "workload.optimizer_impl=apex")


def test_adamw_implementations():
    assert adamw_kwargs("fused") == {"fused": True, "foreach": False}
    assert adamw_kwargs("foreach") == {"fused": False, "foreach": True}
    assert adamw_kwargs("for-loop") == {"fused": False, "foreach": False}
