"""No tensor handed to a collective sits on the wrong device: the first H100 run crashed in
gemm's correctness check, which all-reduced a host tensor over nccl. Here, without a GPU, the raw
workloads run with DISTBENCH_DEVICE_AUDIT=1: torch's default device is meta inside the ranks,
so a tensor made without naming its device (the gemm bug) fails the job instead of passing
silently on CPU. The raw workloads' own real runs run under the audit
(tests/distributed/test_gemm.py, test_collectives.py): each would fail on such a tensor; here the
audit is shown to catch one.

    python -m pytest tests/distributed/test_device_audit.py -q
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from distbench.orchestrator import run_job
from distbench.ranks.worker import DEVICE_AUDIT_ENV
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config

pytestmark = pytest.mark.distributed
FAST = ["tracking=none", "world_size=2", "workload.num_warmup_steps=1", "workload.num_steps=2"]


def test_the_audit_catches_a_tensor_made_without_its_device(tmp_path, monkeypatch):
    """The gemm bug, re-created: the check's error all-reduced from a tensor that names no
    device. Under the audit that tensor is on meta and the job fails, naming it."""
    import distbench.workloads.gemm.workload as gemm_workload

    text = Path(gemm_workload.__file__).read_text()
    assert "dtype=torch.float64, device=device" in text  # the fix the audit guards
    monkeypatch.setenv(DEVICE_AUDIT_ENV, "1")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    # A copy of the package whose gemm check drops `device=device`, first on the ranks' path.
    package = tmp_path / "distbench"
    shutil.copytree(PROJECT_DIR / "src" / "distbench", package)
    broken = package / "workloads" / "gemm" / "workload.py"
    broken.write_text(text.replace("dtype=torch.float64, device=device", "dtype=torch.float64"))
    cfg = compose_config([*FAST, "workload=gemm"])
    outcome = run_job(cfg, tmp_path / "job", CONF_DIR, PROJECT_DIR)
    assert outcome["status"] == "FAILED"
    assert "meta" in outcome["failure_reason"]
