"""hydra/launcher=slurm keeps a sweep's timings apart and its console readable: jobs get whole
nodes unless `exclusive: false`, submitit's sacct warnings are dropped, and each job's state
change is one line.

    pytest tests/unit/test_noise_slurm.py
"""

from __future__ import annotations

import logging
import shutil
import subprocess

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tests.conftest import CONF_DIR

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
from hydra_plugins.distbench_slurm import launcher

pytestmark = pytest.mark.unit


def launcher_config(*overrides: str):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", ["hydra/launcher=slurm", *overrides], return_hydra_config=True)
    return cfg.hydra.launcher


def sbatch_script(*overrides: str) -> str:
    """The sbatch script submitit would submit for the composed launcher (nothing submitted)."""
    params = OmegaConf.to_container(launcher_config(*overrides), resolve=True)
    params.pop("_target_")
    executor = launcher.DistbenchSlurmLauncher(**params)._executor()
    return executor._executor._make_submission_file_text("python -m x", "uid")


@pytest.mark.skipif(
    shutil.which("srun") is None, reason="submitit writes an sbatch script only where srun is"
)
def test_jobs_get_whole_nodes_unless_asked():
    assert launcher_config().exclusive is True
    assert "#SBATCH --exclusive\n" in sbatch_script()
    assert launcher_config("hydra.launcher.exclusive=false").exclusive is False
    assert "exclusive" not in sbatch_script("hydra.launcher.exclusive=false")  # no =False


def test_submitits_sacct_warning_is_dropped(caplog):
    launcher.quiet_sacct()
    launcher.quiet_sacct()  # once
    from submitit.slurm.slurm import SlurmJob

    assert isinstance(SlurmJob.watcher, launcher.QuietSacctWatcher)  # sacct's stderr dropped
    said = subprocess.run(
        launcher.quiet_command(["sh", "-c", "echo accounting disabled >&2; exit 3"]),
        capture_output=True,
        text=True,
        check=False,
    )
    assert (said.returncode, said.stderr) == (3, "")  # its failure still seen by submitit
    logger = logging.getLogger("submitit")
    assert sum(isinstance(f, launcher.QuietSacct) for f in logger.filters) == 1
    with caplog.at_level(logging.WARNING, logger="submitit"):
        logger.warning("Call #3 - Bypassing sacct error Command 'sacct' failed, status may be")
        logger.warning("something else")
    assert [r.getMessage() for r in caplog.records] == ["something else"]


def test_each_state_change_is_one_line():
    states = launcher.parse_squeue_states("12_0 RUNNING\n12_1 PENDING\n\n")
    assert states == {"12_0": "RUNNING", "12_1": "PENDING"}
    labels = {"12_0": "job 1/2", "12_1": "job 2/2"}
    assert launcher.change_lines(labels, {}, states) == [
        "distbench: job 1/2 (SLURM 12_0): RUNNING",
        "distbench: job 2/2 (SLURM 12_1): PENDING",
    ]
    later = {"12_0": "COMPLETED", "12_1": "PENDING"}
    assert launcher.change_lines(labels, states, later) == [
        "distbench: job 1/2 (SLURM 12_0): RUNNING -> COMPLETED"
    ]
