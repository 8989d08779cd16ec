"""A real one-node SLURM cluster (tests/infra/slurm_cluster.py) runs sbatch, srun, submitit and
Hydra's submitit launcher jobs. Skipped with a reason without root or `slurm-wlm munge`.

    pytest tests/e2e/test_slurm_cluster.py

What submitit does here, with no accounting (sacct fails, so submitit's job.state is "UNKNOWN"):
a finished job is seen through its result pickle; a job killed by scancel (or by the time limit
while its Python cannot run the USR2 handler) writes none, so job.done() stays False and
job.result()/job.exception() block forever. Where sacct answers (a cluster with slurmdbd; checked
here with a stand-in sacct printing sacct's "CANCELLED by 0"), job.result() raises
`submitit.core.utils.UncompletedJobError: Job <id> (task: 0) with path .../<id>_0_result.pkl
has not produced any output (state: CANCELLED by 0)` plus the job's stderr, 15 s after the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import pytest
import submitit

from tests.infra.slurm_cluster import PARTITION, slurm_cluster  # noqa: F401

pytestmark = pytest.mark.e2e
# the job functions below travel by value: the job need not import this test module
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SLURM_KEYS = (
    "SLURM_JOB_ID",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_JOB_PARTITION",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
)


def slurm_env() -> dict[str, str | None]:
    """Runs inside a job: the SLURM variables a launcher relies on."""
    return {key: os.environ.get(key) for key in SLURM_KEYS}


def add(a: int, b: int) -> int:
    return a + b


def touch_and_sleep(started: Path, seconds: float) -> str:
    started.touch()  # submitit's signal handlers are in place once the function runs
    time.sleep(seconds)
    return "woke"


def wait_for_file(path: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path} after {timeout_s} s"
        time.sleep(0.2)


def executor(folder: Path, **params) -> submitit.AutoExecutor:
    ex = submitit.AutoExecutor(folder=folder / "%j")
    ex.update_parameters(slurm_partition=PARTITION, timeout_min=5, **params)
    assert ex.cluster == "slurm"
    return ex


def test_sbatch_wrap_hostname_completes(slurm_cluster, tmp_path):  # noqa: F811
    out = tmp_path / "hostname.out"
    job_id = slurm_cluster.sbatch(f"--output={out}", "--wrap", "hostname")
    assert slurm_cluster.wait_until_finished(job_id) == "COMPLETED"
    assert out.read_text().strip() == os.uname().nodename.split(".")[0]


def test_srun_inside_a_batch_job_with_two_cpus(slurm_cluster, tmp_path):  # noqa: F811
    out = tmp_path / "srun.out"
    step = tmp_path / "step.py"
    step.write_text(
        'import os\nprint("step", os.environ["SLURM_STEP_ID"], os.environ["SLURM_CPUS_PER_TASK"])\n'
    )
    script = tmp_path / "srun.sh"
    steps = ["srun --ntasks=1 hostname", f"srun --nodes=1 --ntasks=1 {sys.executable} {step}"]
    script.write_text("\n".join(["#!/bin/bash", *steps, ""]))
    job_id = slurm_cluster.sbatch(f"--output={out}", "--cpus-per-task=2", str(script))
    assert slurm_cluster.wait_until_finished(job_id) == "COMPLETED", out.read_text()
    assert out.read_text().split("\n")[:2] == [os.uname().nodename.split(".")[0], "step 1 2"]


def test_submitit_job_returns_its_value_and_sees_slurm(slurm_cluster, tmp_path):  # noqa: F811
    ex = executor(tmp_path)
    sum_job = ex.submit(add, 2, 3)
    env_job = ex.submit(slurm_env)
    assert sum_job.result() == 5
    env = env_job.result()
    assert env["SLURM_JOB_ID"] == env_job.job_id
    assert env["SLURM_JOB_PARTITION"] == PARTITION
    assert (env["SLURM_JOB_NUM_NODES"], env["SLURM_NTASKS"], env["SLURM_PROCID"]) == ("1", "1", "0")
    assert env_job.state == "UNKNOWN"  # no accounting: sacct fails, submitit cannot tell the state


def test_scancel_leaves_the_job_cancelled_and_submitit_never_done(slurm_cluster, tmp_path):  # noqa: F811
    job = executor(tmp_path).submit(touch_and_sleep, tmp_path / "started", 300)
    wait_for_file(tmp_path / "started")
    job.cancel()  # scancel <id>: SIGTERM (submitit's handler ignores it), SIGKILL after KillWait
    assert slurm_cluster.wait_until_finished(job.job_id) == "CANCELLED"
    # without sacct submitit only knows a job is over from its result pickle, which a killed job
    # never writes: done() stays False, so job.result() would block forever
    assert not job.done(force_check=True)
    assert job.state == "UNKNOWN"
    assert not job.paths.result_pickle.exists()
    assert f"*** JOB {job.job_id} ON" in job.stderr()
    assert "CANCELLED AT" in job.stderr()


HYDRA_APP = """\
import json, os
from pathlib import Path

import hydra


@hydra.main(config_path=".", config_name="config", version_base="1.3")
def main(cfg):
    env = {k: v for k, v in os.environ.items() if k.startswith("SLURM")}
    Path(cfg.out_dir, f"x{cfg.x}.json").write_text(json.dumps({"x": cfg.x, "env": env}))


if __name__ == "__main__":
    main()
"""


def test_hydra_submitit_launcher_runs_a_sweep_as_one_job_array(slurm_cluster, tmp_path):  # noqa: F811
    (tmp_path / "app.py").write_text(HYDRA_APP)
    (tmp_path / "config.yaml").write_text(f"x: 0\nout_dir: {tmp_path}\n")
    proc = subprocess.run(
        [
            sys.executable,
            "app.py",
            "-m",
            "hydra/launcher=submitit_slurm",
            f"hydra.launcher.partition={PARTITION}",
            "hydra.launcher.timeout_min=5",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            "x=1,2",
        ],
        cwd=tmp_path,
        env=slurm_cluster.client_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [json.loads((tmp_path / f"x{x}.json").read_text()) for x in (1, 2)]
    assert [run["x"] for run in runs] == [1, 2]
    array_ids = {run["env"]["SLURM_ARRAY_JOB_ID"] for run in runs}
    assert len(array_ids) == 1, array_ids
    assert sorted(run["env"]["SLURM_ARRAY_TASK_ID"] for run in runs) == ["0", "1"]
