"""Refusals at the edges, each one line before anything starts: `distbench resolve` refuses the
ranks run.py refuses on this machine; an unparsable config.json under model.pretrained_path is
refused when the job resolves (not after its ranks start); a long command line is checked in a
few composes, not one per override; `hydra/launcher=slurm` without a reachable SLURM controller
is one line, and the sweep's parent run ends FAILED with the reason.

    pytest tests/unit/test_edges_refusals.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from distbench.cli import main as distbench
from distbench.compose import overrides as override_check
from distbench.compose.composer import Composer
from distbench.orchestrator import precheck
from distbench.orchestrator.launching import MAX_RANKS_PER_CPU_CORE
from distbench.orchestrator.refused import resolve_or_refuse
from distbench.probes.detect import num_cpu_cores
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.unit
def test_resolve_refuses_the_ranks_run_py_refuses_on_this_machine(capsys):
    too_many = MAX_RANKS_PER_CPU_CORE * num_cpu_cores() + 1
    overrides = ["hardware=cpu", f"world_size={too_many}"]
    assert precheck(compose_config(overrides), CONF_DIR)  # run.py refuses it
    assert distbench(["resolve", *overrides]) == 2
    captured = capsys.readouterr()
    line = one_line(captured.err)
    assert line.startswith("distbench: resolve: invalid config: ") and f"{too_many} ranks" in line
    assert captured.out == ""
    assert distbench(["resolve", "--json", *overrides]) == 2


@pytest.mark.unit
@pytest.mark.parametrize(
    ("config_json", "says"),
    [('{"model_type": "llama", ', "config.json is not valid JSON"), ("[1]", "not a JSON object")],
)
def test_an_unparsable_pretrained_config_is_refused_when_the_job_resolves(
    tmp_path, capsys, config_json, says
):
    (tmp_path / "config.json").write_text(config_json)
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 64)
    overrides = ["model=tiny", f"model.pretrained_path={tmp_path}"]
    refusal = precheck(compose_config(overrides), CONF_DIR)  # run.py's, before any rank
    assert refusal and says in refusal and str(tmp_path) in refusal
    refused = resolve_or_refuse(compose_config(overrides), CONF_DIR)  # a sweep's job
    assert says in refused.reason
    assert distbench(["resolve", *overrides]) == 2
    assert says in one_line(capsys.readouterr().err)


@pytest.mark.unit
def test_a_long_command_line_is_checked_in_a_few_composes(monkeypatch):
    """One compose per override (~0.28 s each: 300 overrides, 104 s before the first job) is now
    one for the first values, one per other swept value, and a bisection for a refusal."""
    calls = []
    compose = Composer.__call__
    monkeypatch.setattr(Composer, "__call__", lambda self, o: calls.append(1) or compose(self, o))
    notes = [f"+note.k{i:03d}=v" for i in range(100)]
    assert override_check.refuse_overrides(["-m", "world_size=0,2", *notes], CONF_DIR) is None
    assert len(calls) == 2  # the first values, then world_size=2
    calls.clear()
    refusal = override_check.refuse_overrides([*notes[:15], "world_size=nan"], CONF_DIR)
    assert refusal.startswith("world_size=nan: Value 'nan'") and len(calls) <= 6  # 1 + log2(16)


@pytest.mark.e2e
def test_a_slurm_sweep_without_a_controller_is_one_line_and_a_failed_parent(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    (tmp_path / "slurm.conf").write_text("")  # no controller to reach (a missing file: 60 s)
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "SLURM_CONF": str(tmp_path / "slurm.conf")}
    args = ["-m", "hydra/launcher=slurm", f"hydra.sweep.dir={tmp_path}/s", "world_size=0,2"]
    proc = subprocess.run(
        [sys.executable, str(PROJECT_DIR / "run.py"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if " INFO mlflow." not in ln]  # a new store's
    line = one_line("\n".join(said))
    # SLURM installed: sbatch's own refusal; not installed: submitit finds no srun
    why = "sbatch: fatal" if shutil.which("sbatch") else 'Could not detect "srun"'
    assert line.startswith(f"distbench: SLURM did not take the sweep ({why}"), line
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("distbench").experiment_id
    (parent,) = client.search_runs([experiment])  # no child run: no job was submitted
    assert parent.info.status == "FAILED"
    assert parent.data.tags["failure_reason"].startswith("SLURM did not take the sweep")
    assert parent.data.metrics["num_jobs"] == 2 and parent.data.metrics["num_finished"] == 0
