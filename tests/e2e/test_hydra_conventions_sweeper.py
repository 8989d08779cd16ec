"""A Hydra sweeper plugin gets main()'s objective: a minimal sweeper (BasicSweeper that writes
each job's return value to a file, put on the plugin path in tmp_path, as Optuna's would be
installed) drives a real 2-job sweep through run.py: one job that trains (its throughput comes
back, the number MLflow has) and one refused job (the worst value, 0.0). ~20 s on 2 CPU cores.
The job that trains is the suite's run of strategy=zero1 (DeepSpeed's ZeRO stage 1): its
first-step loss is the single device's (equivalent=true).

    pytest tests/e2e/test_hydra_conventions_sweeper.py
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from tests.e2e.test_sweep import FEW_STEPS, run_py, runs_of

pytestmark = pytest.mark.e2e

RECORDING_SWEEPER = '''
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore


@dataclass
class RecordingSweeperConf:
    _target_: str = "hydra_plugins.recording_sweeper.RecordingSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None
    out: str = "returns.json"


ConfigStore.instance().store(group="hydra/sweeper", name="recording", node=RecordingSweeperConf)


class RecordingSweeper(BasicSweeper):
    """The basic sweep, then each job's return value (what a searching sweeper reads)."""

    def __init__(self, max_batch_size=None, params=None, out="returns.json") -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.out = out

    def sweep(self, arguments: Any) -> Any:
        returns = super().sweep(arguments)
        values = [[list(r.overrides), r.return_value] for batch in returns for r in batch]
        Path(self.out).write_text(json.dumps(values))
        return returns
'''


@pytest.mark.usefixtures("sqlite_store")  # a copy of the empty store: no migrations
def test_a_sweeper_plugin_receives_the_objective_of_each_job(tmp_path):
    plugin = tmp_path / "plugins" / "hydra_plugins" / "recording_sweeper"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text(textwrap.dedent(RECORDING_SWEEPER))
    out = tmp_path / "returns.json"
    path = os.pathsep.join(filter(None, [str(tmp_path / "plugins"), os.environ.get("PYTHONPATH")]))
    proc = run_py(
        [
            "-m",
            "hydra/sweeper=recording",
            f"hydra.sweeper.out={out}",
            "zero_stage=1,5",  # 5: refused, a FAILED run (invalid_config)
            "strategy=zero1",
            *FEW_STEPS,
            f"hydra.sweep.dir={tmp_path}/sweep",
        ],
        tmp_path,
        timeout_s=600,
        env={"PYTHONPATH": path},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    returned = {overrides[0]: value for overrides, value in json.loads(out.read_text())}
    assert set(returned) == {"zero_stage=1", "zero_stage=5"}
    runs = runs_of(tmp_path).dropna(subset=["tags.mlflow.parentRunId"])
    finished = runs[runs["status"] == "FINISHED"].iloc[0]
    assert returned["zero_stage=1"] == pytest.approx(finished["metrics.throughput_tokens_per_s"])
    assert returned["zero_stage=1"] > 0
    # ZeRO-1 computes the single-device model's first-step loss
    assert (finished["tags.strategy"], finished["tags.zero_stage"]) == ("zero1", "1")
    assert finished["tags.equivalent"] == "true", finished["metrics.loss_rel_err_vs_single"]
    assert returned["zero_stage=5"] == 0.0  # refused: the worst throughput
    assert set(runs["tags.failure_kind"].dropna()) == {"invalid_config"}
