"""Shared fixtures: compose configs exactly as run.py does (Hydra compose API), and GPU skips.

pytest -m unit          # fast layer only
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psutil
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from distbench.compose.schema import register_configs

PROJECT_DIR = Path(__file__).resolve().parents[1]
CONF_DIR = PROJECT_DIR / "conf"
os.environ.setdefault("DISTBENCH_HOME", str(PROJECT_DIR))  # as run.py: experiments/ on the path
# The product's default, hardware.time_source=auto, times each new model shape on this machine
# (~10-20 s here) and makes predictions depend on this host's speed: the suite predicts with
# the efficiency model unless a test asks for measured parts (tests/unit/test_time_source.py
# runs the default itself).
os.environ["DISTBENCH_TIME_SOURCE"] = "efficiency"
register_configs()


def compose_config(overrides: list[str] | None = None) -> DictConfig:
    """The job config that `python run.py <overrides>` would get (hydra node removed)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides or [], return_hydra_config=False)
    with open_dict(cfg):
        cfg.pop("hydra", None)
    return cfg


def config_options(group: str) -> list[str]:
    """The options of a config group: its YAML files under conf/, or for `workload` the names
    in the workload registry (each workload registers its option from its own folder)."""
    if group == "workload":
        from distbench import workloads

        return sorted(workloads.registry())
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def has_cuda_devices(count: int = 1) -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() >= count


def requires_gpus(count: int = 1):
    """Skip with a reason where fewer than `count` CUDA devices are present."""
    return pytest.mark.skipif(
        not has_cuda_devices(count), reason=f"needs {count} CUDA device(s); none found here"
    )


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line names `text` (a zombie has exited: only its parent's
    wait is missing)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(text in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def measured_parts(gemm_s: float, other_s: float, host_s: float) -> dict:
    """HardwareConfig fields of a micro-batch's measured parts (time_source=measured), as
    compose/step_parts.py fills them: 2000 kernels, an H100-like floor and bandwidth."""
    return dict(
        time_source="measured",
        micro_batch_gemm_s=gemm_s,
        micro_batch_attention_s=0.01,
        micro_batch_other_s=other_s,
        micro_batch_host_s=host_s,
        kernels_per_micro_batch=2000,
        host_us_per_kernel=host_s / 2000 * 1e6,
        kernel_floor_us=2.0,
        measured_mem_bandwidth_gbps=3000.0,
    )
