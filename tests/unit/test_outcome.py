"""The orchestrator's typed pieces: an Outcome writes outcome.json's keys and reads them back, a
config that does not resolve becomes a Refused job named from what was asked, and a run's name
comes from its workload's run_label.

pytest tests/unit/test_outcome.py -m unit
"""

from __future__ import annotations

import time

import pytest

from distbench.orchestrator import JobContext, Outcome, Refused, new_outcome, resolve_or_refuse
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit


def test_an_outcome_writes_only_its_set_keys_and_reads_them_back():
    outcome = Outcome("job 1/2", micro_batch_size=None, signature="abc", names={"strategy": "dp"})
    outcome.update({"status": "FAILED", "failure_kind": "oom", "equivalent": "true"})
    written = outcome.as_dict()
    assert written == {
        "job": "job 1/2",
        "micro_batch_size": None,  # a named job always says it, null too
        "signature": "abc",
        "strategy": "dp",
        "status": "FAILED",
        "equivalent": "true",
        "failure_kind": "oom",
    }
    assert Outcome.from_dict(written).as_dict() == written
    bare = Outcome("job", status="FAILED", failure_kind="orchestrator_error").as_dict()
    assert bare == {"job": "job", "status": "FAILED", "failure_kind": "orchestrator_error"}


def test_a_refused_config_is_named_by_what_was_asked(tmp_path):
    job = resolve_or_refuse(compose_config(["strategy=tp", "world_size=3"]), CONF_DIR)
    assert isinstance(job, Refused) and "not divisible by tp(2)" in job.reason
    outcome = new_outcome(job, JobContext(tmp_path / "0", tmp_path, "job 1/1", time.monotonic()))
    written = outcome.as_dict()
    assert (written["run_name"], written["strategy"], written["zero_stage"]) == (
        "tp-ws3",
        "tp",
        "invalid",
    )
    assert "metrics" not in written and job.tree()["world_size"] == 3


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        (["strategy=dp", "zero_stage=2"], "dp-z2-ws2"),  # a stage the strategy does not imply
        (["strategy=zero3"], "zero3-ws2"),
        (["workload=inference", "strategy=tp"], "inference-tp-ws2"),
        (["workload=gemm"], "gemm-ws2"),
    ],
)
def test_a_run_is_named_by_its_workloads_run_label(tmp_path, overrides, name):
    job = resolve_or_refuse(compose_config([*overrides, "world_size=2"]), CONF_DIR)
    ctx = JobContext(tmp_path, tmp_path, "job", time.monotonic())
    assert new_outcome(job, ctx).run_name == name
