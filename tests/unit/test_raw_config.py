"""workload=gemm and workload=collectives compose, resolve into a Job without the train-only
checks, and refuse bad input in one line with the numbers in it."""

from __future__ import annotations

import pytest

from distbench.compose.schema import ConfigError
from distbench.job import RAW_ENGINE, resolve_job
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("workload", ["gemm", "collectives"])
@pytest.mark.parametrize("world_size", [1, 3, 4])
def test_raw_workloads_need_only_ranks(workload, world_size):
    extra = ["gemm.m=3072"] if workload == "gemm" else []  # 3072 = 3 * 1024 = 4 * 768
    # strategy=tp would refuse world_size=3 for training; a raw workload has no strategy
    cfg = compose_config(
        [f"workload={workload}", f"world_size={world_size}", "strategy=tp", *extra]
    )
    job = resolve_job(cfg, CONF_DIR)
    layout = job.layout
    assert (layout.world_size, layout.dp, layout.tp, layout.pp) == (world_size, world_size, 1, 1)
    # no model, no strategy: no ZeRO stage (None, where validate() used to report 0)
    assert layout.zero_stage is None and layout.tag == "none"
    assert (job.builds_model, job.strategy, job.engine) == (False, None, RAW_ENGINE)


def test_defaults_and_the_dtype_tag_follow_the_workload_node():
    cfg = compose_config(["workload=gemm", "gemm.dtype=bf16"])
    assert cfg.workload.dtype == "bf16" and cfg.workload.num_steps >= 10
    cfg = compose_config(["workload=collectives"])
    assert cfg.collectives.max_bytes is None and cfg.collectives.min_bytes == 1024
    assert list(cfg.collectives.ops) == [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "all_to_all",
        "send_recv",
    ]


def test_single_mode_validates_on_one_rank():
    job = resolve_job(
        compose_config(["workload=gemm", "gemm.mode=single", "world_size=1"]), CONF_DIR
    )
    assert job.layout.world_size == 1 and job.options.mode == "single"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["workload=gemm", "gemm.k=1001", "gemm.sharding=k"],
            "gemm.k(1001) is not divisible by world_size(2)",
        ),
        (["workload=gemm", "gemm.m=1001"], "gemm.m(1001) is not divisible by world_size(2)"),
        (["workload=gemm", "gemm.sharding=diag"], "gemm.sharding='diag' is not allowed"),
        (["workload=gemm", "gemm.n=0"], "gemm.n=0 must be >= 1"),
        (
            ["workload=gemm", "gemm.mode=single"],
            "gemm.mode=single runs on one device, got world_size=2",
        ),
        (["workload=gemm", "gemm.dtype=fp8"], "gemm.dtype='fp8' is not allowed"),
        (
            ["workload=collectives", "collectives.min_bytes=0"],
            "collectives.min_bytes=0 must be >= 1",
        ),
        (
            ["workload=collectives", "collectives.max_bytes=512"],
            "collectives.max_bytes(512) < collectives.min_bytes(1024)",
        ),
        (["workload=collectives", "collectives.factor=1"], "collectives.factor=1 must be >= 2"),
        (
            ["workload=collectives", "collectives.ops=[all_reduce,reduce]"],
            "collectives.ops='reduce'",
        ),
        (
            ["workload=collectives", "collectives.emulate=[broadcast]"],
            "collectives.emulate='broadcast'",
        ),
        (["workload=collectives", "world_size=0"], "world_size=0 must be >= 1"),
        (["workload=collectives", "workload.num_steps=0"], "workload.num_steps=0 must be >= 1"),
    ],
)
def test_raw_refusals_name_the_bad_value(overrides, message):
    with pytest.raises(ConfigError) as err:
        resolve_job(compose_config(overrides), CONF_DIR)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
