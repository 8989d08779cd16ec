"""Several "nodes" on one machine: N torchrun agents, each the command a real node runs.

`rank_launcher=local_nodes` runs a multi-node job on one machine through the same code path as a
cluster: every agent is the exact torchrun command that `srun` starts once per node, meeting the
others at a c10d rendezvous on 127.0.0.1. The agents are this process's children, so the
orchestrator's watchdog finds every rank under one pid, and one agent failing stops the others
(as `srun --kill-on-bad-exit` does on a cluster). The agents die with this process (its own
parent-death signal is armed by run_workers; launch/lifeline.py).

    python -m distbench.launch.node_agents 2 -- python -m torch.distributed.run --nnodes=2 ..
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from distbench.launch.lifeline import die_with_parent

POLL_S = 0.2


def run_agents(num_nodes: int, agent_cmd: list[str]) -> int:
    """Start `num_nodes` copies of agent_cmd; wait for all; return the first non-zero exit code
    (after stopping the others), else 0."""
    agents = [subprocess.Popen(agent_cmd, preexec_fn=die_with_parent()) for _ in range(num_nodes)]

    def stop(*_: object) -> None:
        for agent in agents:
            if agent.poll() is None:
                agent.terminate()

    signal.signal(signal.SIGTERM, lambda *a: (stop(), sys.exit(128 + signal.SIGTERM)))
    failed = 0
    while True:
        codes = [agent.poll() for agent in agents]  # poll every agent: each updates its code
        failed = next((code for code in codes if code not in (None, 0)), 0)
        if failed:
            stop()
            break
        if None not in codes:
            break
        time.sleep(POLL_S)
    for agent in agents:
        agent.wait()
    return failed or next((a.returncode for a in agents if a.returncode), 0)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit() or int(argv[0]) < 1:
        print(
            "usage: python -m distbench.launch.node_agents NUM_NODES -- AGENT_COMMAND...",
            file=sys.stderr,
        )
        return 2
    return run_agents(int(argv[0]), argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
