"""resolve_job() on workload=inference: its own checks, one line each with the numbers.

pytest tests/unit/test_inference_config.py -m unit
"""

from __future__ import annotations

import pytest

from distbench.compose.schema import BatchConfig, ConfigError
from distbench.job import Layout, resolve_job
from distbench.workloads.inference import InferenceConfig, inference_sizes
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit


def layout(*overrides: str) -> Layout:
    cfg = compose_config(["workload=inference", "tracking=none", *overrides])
    return resolve_job(cfg, CONF_DIR).layout


def test_replicas_and_tensor_parallel_layouts():
    assert layout("strategy=dp").as_dict() == dict(world_size=2, dp=2, tp=1, pp=1, zero_stage=0)
    assert layout("strategy=tp", "world_size=4").as_dict()["dp"] == 2
    assert layout("strategy=zero1").dp == 2  # training state only: runs as replicas
    ddp = layout("strategy=ddp")
    assert (ddp.dp, ddp.zero_stage) == (2, None)  # the torch engine has no ZeRO stage


def job_of(*overrides: str):
    return resolve_job(compose_config(["workload=inference", *overrides]), CONF_DIR)


def test_sizes_default_to_the_batch_group():
    job = job_of("batch=small")
    assert inference_sizes(job.options, job.batch) == (128, 2)
    job = job_of("inference.prompt_len=7", "inference.batch_size=5")
    assert inference_sizes(job.options, job.batch) == (7, 5)
    batch = BatchConfig(name="b", micro_batch_size=4, seq_len=9)
    assert inference_sizes(InferenceConfig(batch_size=3), batch) == (9, 3)


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
        (["activation_checkpointing=full"], "activation_checkpointing=full: workload=inference"),
        (["hardware=cpu", "workload.dtype=fp16"], "does not run on CPU"),
        (["hardware=cpu", "inference.cuda_graph=true"], "inference.cuda_graph=true needs a CUDA"),
        (["inference.kernel_inject=true"], "do not run with the transformers versions"),
        (
            ["hardware=h100_sxm", "strategy=tp", "inference.cuda_graph=true"],
            "inference.cuda_graph=true runs on whole replicas, not with tp(2)",
        ),
        (
            ["hardware=h100_sxm", "inference.cuda_graph=true", "workload.num_warmup_steps=0"],
            "workload.num_warmup_steps=0 must be >= 1",
        ),
    ],
)
def test_refusals_name_the_value(overrides, message):
    with pytest.raises(ConfigError) as err:
        layout(*overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_longest_prompt_that_fits():
    assert layout("inference.prompt_len=1008", "inference.num_new_tokens=16").dp == 2
