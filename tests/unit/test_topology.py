"""Nodes × ranks per node: the job's topology, who starts the ranks, the command lines of each path,
SLURM end states as failure kinds, and local node agents stopping together.

    pytest tests/unit/test_topology.py
"""

from __future__ import annotations

import sys
import time

import pytest

from distbench.compose.checks import resolve_num_nodes
from distbench.compose.schema import ConfigError
from distbench.job import Job, Topology, resolve_job
from distbench.launch.node_agents import run_agents
from distbench.launch.slurm_state import parse_scontrol_job, scheduler_failure, task_line
from distbench.launch.topology import plan_launch, resolve_rank_launcher, slurm_job_id
from distbench.launch.workers import first_node_of_allocation
from distbench.orchestrator import describe
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

IN_SLURM = {"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "vm"}


def job_of(*overrides: str) -> Job:
    return resolve_job(compose_config(list(overrides)), CONF_DIR)


@pytest.mark.parametrize(
    ("choice", "num_nodes", "env", "launcher"),
    [
        ("auto", 1, {}, "torchrun"),
        ("auto", 1, IN_SLURM, "srun"),
        ("auto", 2, IN_SLURM, "srun"),
        ("local_nodes", 2, {}, "local_nodes"),
        ("torchrun", 1, IN_SLURM, "torchrun"),
    ],
)
def test_rank_launcher_resolves(choice, num_nodes, env, launcher):
    assert resolve_rank_launcher(choice, num_nodes, env) == launcher


@pytest.mark.parametrize(
    ("choice", "num_nodes", "env", "message"),
    [
        ("auto", 2, {}, "num_nodes=2 needs a SLURM allocation (hydra/launcher=slurm)"),
        ("srun", 1, {}, "rank_launcher=srun needs a SLURM allocation"),
        ("srun", 4, IN_SLURM, "num_nodes=4 but the SLURM allocation has 2 node(s)"),
    ],
)
def test_rank_launcher_refuses_what_cannot_start_here(choice, num_nodes, env, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_rank_launcher(choice, num_nodes, env)


def test_num_nodes_defaults_to_what_the_hardware_holds():
    assert resolve_num_nodes(compose_config(["hardware=h100_sxm", "world_size=16"])) == 2
    assert resolve_num_nodes(compose_config(["hardware=cpu", "world_size=16"])) == 1
    assert resolve_num_nodes(compose_config(["num_nodes=4", "world_size=16"])) == 4
    job = job_of("hardware=h100_sxm", "world_size=16")
    assert job.topology == Topology(
        num_nodes=2, ranks_per_node=8, rank_launcher="auto", tp_across_nodes=False
    )
    tags = describe(job)
    assert (tags["num_nodes"], tags["ranks_per_node"]) == ("2", "8")
    assert (job.tree()["num_nodes"], job.tree()["ranks_per_node"]) == (2, 8)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["world_size=4", "num_nodes=3"], "world_size(4) is not divisible by num_nodes(3)"),
        (
            ["hardware=h100_sxm", "world_size=16", "num_nodes=1"],
            "16 ranks per node (world_size(16) / num_nodes(1)) > hardware.devices_per_node(8)",
        ),
        (
            ["strategy=tp", "world_size=4", "num_nodes=4"],
            "tp(2) does not divide the 1 ranks of a node: TP groups would span nodes",
        ),
        (["rank_launcher=mpirun"], "rank_launcher='mpirun' is not allowed"),
        (["num_nodes=0"], "num_nodes=0 must be >= 1"),
    ],
)
def test_topology_refusals_name_the_values(overrides, message):
    with pytest.raises(ConfigError) as err:
        resolve_job(compose_config(overrides), CONF_DIR)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_tp_across_nodes_runs_when_the_user_insists():
    job = job_of("strategy=tp", "world_size=4", "num_nodes=4", "tp_across_nodes=true")
    assert job.layout.tp == 2
    assert (job.topology.ranks_per_node, job.topology.tp_across_nodes) == (1, True)


def test_one_node_is_a_static_torchrun_on_loopback(tmp_path):
    plan = plan_launch(job_of("world_size=2"), tmp_path, env={})
    assert plan.rank_launcher == "torchrun" and plan.cmd[1:3] == ["-m", "torch.distributed.run"]
    assert f"--master_port={plan.port}" in plan.cmd and "--nproc_per_node=2" in plan.cmd
    assert plan.tags() == {"num_nodes": "1", "ranks_per_node": "2", "rank_launcher": "torchrun"}


def test_local_nodes_are_agents_at_one_c10d_rendezvous(tmp_path):
    job = job_of("world_size=4", "num_nodes=2", "rank_launcher=local_nodes")
    plan = plan_launch(job, tmp_path, env={})
    assert plan.cmd[1:4] == ["-m", "distbench.launch.node_agents", "2"]
    agent = plan.cmd[plan.cmd.index("--") + 1 :]
    assert "--nnodes=2" in agent and "--nproc_per_node=2" in agent
    assert "--rdzv_backend=c10d" in agent and f"--rdzv_endpoint=127.0.0.1:{plan.port}" in agent
    assert (plan.ranks_per_node, plan.ranks_here) == (2, 4)  # four ranks share this machine


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [("vm", "vm"), ("gpu[07-08,11],cpu3", "gpu07"), ("n[1-2]-ib", "n1-ib"), ("a,b", "a")],
)
def test_first_node_of_a_hostlist(nodelist, first):
    assert first_node_of_allocation(nodelist) == first


def test_srun_starts_one_agent_per_node_meeting_on_the_first(tmp_path):
    job = job_of("world_size=4", "num_nodes=2")
    env = {**IN_SLURM, "SLURM_JOB_NODELIST": "gpu[07-08]"}
    plan = plan_launch(job, tmp_path, env=env)
    assert plan.cmd[:7] == [
        "srun",
        "--overlap",
        "--mem=0",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
    ]
    assert f"--rdzv_endpoint=gpu07:{plan.port}" in plan.cmd
    assert (plan.rank_launcher, plan.ranks_here) == ("srun", 2)


def test_slurm_job_ids_of_arrays_are_what_squeue_shows():
    assert slurm_job_id({"SLURM_JOB_ID": "7"}) == "7"
    array = {"SLURM_JOB_ID": "9", "SLURM_ARRAY_JOB_ID": "8", "SLURM_ARRAY_TASK_ID": "1"}
    assert slurm_job_id(array) == "8_1"


@pytest.mark.parametrize(
    ("state", "kind"),
    [
        ("CANCELLED", "cancelled"),
        ("CANCELLED by 0", "cancelled"),
        ("TIMEOUT", "timeout"),
        ("NODE_FAIL", "node_failure"),
        ("OUT_OF_MEMORY", "oom"),
        ("PREEMPTED", "preempted"),
        ("FAILED", "crash"),
        ("", "crash"),
    ],
)
def test_slurm_end_states_are_failure_kinds(state, kind):
    got_kind, reason = scheduler_failure(state, "None")
    assert got_kind == kind and (state or "UNKNOWN") in reason and "reason:" not in reason


def test_scontrol_job_line_parses():
    line = "JobId=12 ArrayJobId=11 JobName=run JobState=TIMEOUT Reason=TimeLimit Dependency=(null)"
    assert parse_scontrol_job(line) == ("TIMEOUT", "TimeLimit")
    assert scheduler_failure("TIMEOUT", "TimeLimit")[1].endswith("(reason: TimeLimit)")


def test_local_node_agents_stop_together(tmp_path):
    assert run_agents(2, [sys.executable, "-c", "pass"]) == 0
    # the first "node" to claim the file fails at once; its twin would sleep 10 minutes
    claim = (
        "import os, sys, time\n"
        "try:\n"
        f"    os.open({str(tmp_path / 'first')!r}, os.O_CREAT | os.O_EXCL)\n"
        "except FileExistsError:\n"
        "    time.sleep(600)\n"
        "sys.exit(3)\n"
    )
    started = time.monotonic()
    assert run_agents(2, [sys.executable, "-c", claim]) == 3
    assert time.monotonic() - started < 300  # the sleeping twin was stopped


def test_an_array_task_is_found_in_the_arrays_listing():
    listing = (
        "JobId=2 ArrayJobId=1 ArrayTaskId=0 JobState=RUNNING Reason=None\n"
        "JobId=1 ArrayJobId=1 ArrayTaskId=1 JobState=CANCELLED Reason=None\n"
    )
    assert parse_scontrol_job(task_line(listing, "1")) == ("CANCELLED", "None")
    assert task_line(listing, "7") is None
    assert task_line("JobId=5 JobState=TIMEOUT Reason=TimeLimit", "") is not None
