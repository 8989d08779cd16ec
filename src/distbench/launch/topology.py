"""Nodes × ranks per node → who starts the ranks and with which command line.

One node: a torchrun on this machine (`torchrun`), or the same torchrun through `srun` inside a
SLURM allocation. Several nodes: one torchrun agent per node meeting at a c10d rendezvous on the
first node, started by `srun` (one task per node) on a cluster, or `local_nodes` agents on this
machine (the same agents, for tests and for trying the path without a cluster).

    python -c "import distbench.launch.topology as t; print(t.resolve_rank_launcher('auto', 2, {}))"
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from distbench.compose.schema import ConfigError
from distbench.job import Job
from distbench.launch.workers import (
    MASTER_ADDR,
    first_node_of_allocation,
    free_port,
    local_nodes_command,
    node_agent_command,
    srun_command,
    worker_command,
)
from distbench.probes.threads import ranks_sharing_machine

SLURM_JOB_ENV = "SLURM_JOB_ID"


def resolve_rank_launcher(choice: str, num_nodes: int, env: Mapping[str, str]) -> str:
    """`auto` → srun inside a SLURM allocation, else torchrun (one node only). Raises
    ConfigError when the choice cannot start `num_nodes` nodes here."""
    in_slurm = SLURM_JOB_ENV in env
    launcher = choice
    if choice == "auto":
        launcher = "srun" if in_slurm else "torchrun"
    if launcher == "srun":
        if not in_slurm:
            raise ConfigError(
                "rank_launcher=srun needs a SLURM allocation (run with hydra/launcher=slurm, "
                "or inside sbatch/salloc)"
            )
        allocated = int(env.get("SLURM_JOB_NUM_NODES", "1"))
        if allocated < num_nodes:
            raise ConfigError(
                f"num_nodes={num_nodes} but the SLURM allocation has {allocated} node(s); "
                f"set hydra.launcher.nodes={num_nodes}"
            )
    elif launcher == "torchrun" and num_nodes > 1:
        raise ConfigError(
            f"num_nodes={num_nodes} needs a SLURM allocation (hydra/launcher=slurm) or "
            "rank_launcher=local_nodes; this is one machine"
        )
    return launcher


def slurm_job_id(env: Mapping[str, str]) -> str:
    """The id squeue/sacct show: `<array job>_<task>` for a job array (a Hydra sweep)."""
    if "SLURM_ARRAY_JOB_ID" in env and "SLURM_ARRAY_TASK_ID" in env:
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env[SLURM_JOB_ENV]


@dataclass
class LaunchPlan:
    """The command that starts every rank of a job, and what it tells about the topology."""

    cmd: list[str]
    rank_launcher: str  # torchrun | srun | local_nodes
    num_nodes: int
    ranks_per_node: int
    ranks_here: int  # ranks on this machine: they share its cores and GPUs
    port: int  # the master port (one node) or the c10d rendezvous port (several)

    def tags(self) -> dict[str, str]:
        return {
            "num_nodes": str(self.num_nodes),
            "ranks_per_node": str(self.ranks_per_node),
            "rank_launcher": self.rank_launcher,
        }


def plan_launch(job: Job, job_dir: Path, env: Mapping[str, str] = os.environ) -> LaunchPlan:
    """The rank-starting command for a job (raises ConfigError as above)."""
    num_nodes, per_node = job.topology.num_nodes, job.topology.ranks_per_node
    launcher = resolve_rank_launcher(job.topology.rank_launcher, num_nodes, env)
    port = free_port()
    if num_nodes == 1:  # a static rendezvous on loopback: the port names DeepSpeed's shm files
        agent = worker_command(job_dir, per_node, port)
    else:
        host = MASTER_ADDR
        if launcher == "srun":
            host = first_node_of_allocation(env["SLURM_JOB_NODELIST"])
        rdzv_id = f"{env.get(SLURM_JOB_ENV, 'local')}-{port}"
        agent = node_agent_command(job_dir, num_nodes, per_node, f"{host}:{port}", rdzv_id)
    cmd = agent
    if launcher == "srun":
        cmd = srun_command(agent, num_nodes)
    elif launcher == "local_nodes" and num_nodes > 1:
        cmd = local_nodes_command(agent, num_nodes)
    ranks_here = ranks_sharing_machine(launcher, job.world_size, per_node)
    return LaunchPlan(cmd, launcher, num_nodes, per_node, ranks_here, port)
