"""ZeRO-3 builds its model already partitioned (`deepspeed.zero.Init`) and fills its partitions
with the same deterministic weights every other layout starts from.

One rank in this process (gloo, world size 1); the two-rank case is test_strategies.py's zero3
row, whose first loss equals dp's.

    python -m pytest tests/distributed/test_zero3_init.py -q
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from distbench.engines.deepspeed import build_partitioned, builds_partitioned, ds_config
from distbench.job import resolve_job
from distbench.ranks.models import build_model
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.distributed


@pytest.fixture
def one_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(key, value)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_zero3_partitions_hold_the_same_weights_as_the_whole_model(one_rank):
    job = resolve_job(compose_config(["model=tiny", "strategy=zero3", "world_size=1"]), CONF_DIR)
    assert builds_partitioned(job)
    partitioned = build_partitioned(job, ds_config(job))
    whole = dict(build_model(job.model, "fp32", job.workload.seed).named_parameters())
    for name, param in partitioned.named_parameters():
        assert hasattr(param, "ds_tensor"), name  # partitioned at construction
        values = param.ds_tensor.data.view(-1)[: param.ds_numel]
        assert torch.equal(values, whole[name].detach().view(-1)), name
    assert os.environ["DS_ACCELERATOR"] == "cpu"
