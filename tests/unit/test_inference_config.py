"""validate() on workload=inference: its own checks, one line each with the numbers.

pytest tests/unit/test_inference_config.py -m unit
"""

from __future__ import annotations

import pytest

from distbench.compose.schema import ConfigError, inference_sizes, validate
from tests.conftest import compose_config

pytestmark = pytest.mark.unit


def layout(*overrides: str):
    return validate(compose_config(["workload=inference", "tracking=none", *overrides]))


def test_replicas_and_tensor_parallel_layouts():
    assert layout("strategy=dp").as_dict() == dict(world_size=2, dp=2, tp=1, pp=1, zero_stage=0)
    assert layout("strategy=tp", "world_size=4").as_dict()["dp"] == 2
    assert layout("strategy=zero1").dp == 2  # training state only: runs as replicas
    assert layout("strategy=ddp").dp == 2


def test_sizes_default_to_the_batch_group():
    cfg = compose_config(["workload=inference", "batch=small"])
    assert inference_sizes(cfg.inference, cfg.batch) == (128, 2)
    cfg = compose_config(["workload=inference", "inference.prompt_len=7", "inference.batch_size=5"])
    assert inference_sizes(cfg.inference, cfg.batch) == (7, 5)
    assert inference_sizes({"prompt_len": None, "batch_size": 3}, {"seq_len": 9}) == (9, 3)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["strategy=pp"], "not pp(2)"),
        (["strategy=zero3"], "strategy=zero3 (zero_stage=3, offload_param=none) shards"),
        (["strategy=fsdp"], "strategy=fsdp (data_parallel=fsdp) shards"),
        (["strategy=torch_tp"], "engine=torch; use strategy=tp"),
        (
            ["strategy=tp", "model.num_kv_heads=1"],
            "model.num_kv_heads(1) is not divisible by tp(2)",
        ),
        (["inference.num_new_tokens=1"], "inference.num_new_tokens=1 must be >= 2"),
        (["inference.batch_size=0"], "inference.batch_size (or batch.micro_batch_size)=0"),
        (
            ["inference.prompt_len=1000", "inference.num_new_tokens=25"],
            "prompt_len(1000) + inference.num_new_tokens(25) > model.max_position_embeddings(1024)",
        ),
        (["inference.decoding=beam"], "inference.decoding='beam' is not allowed"),
        (["workload.num_steps=0"], "workload.num_steps=0 must be >= 1"),
        (["hardware=cpu", "workload.dtype=fp16"], "does not run on CPU"),
    ],
)
def test_refusals_name_the_value(overrides, message):
    with pytest.raises(ConfigError) as err:
        layout(*overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_longest_prompt_that_fits():
    assert layout("inference.prompt_len=1008", "inference.num_new_tokens=16").dp == 2
