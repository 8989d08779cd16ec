"""Pure pieces of "sweeps that survive": heartbeats, signatures, secret masking, and resolving a
job that refuses any input with a message, never a traceback (property-based)."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distbench.compose.schema import ConfigError
from distbench.job import Job, resolve_job
from distbench.launch.watchdog import Watchdog
from distbench.orchestrator import device_shortfall
from distbench.tracking.secrets_mask import mask_text, mask_tree
from distbench.tracking.signature import run_signature
from distbench.tracking.sweep import require_writable
from tests.conftest import CONF_DIR, compose_config, config_options

pytestmark = pytest.mark.unit

LIMITS = SimpleNamespace(startup_timeout_s=30.0, stall_timeout_s=10.0, max_mem_gib=None)


def beat(job_dir, rank, step, age_s, now=None):
    path = job_dir / "heartbeat" / f"rank{rank}"
    path.parent.mkdir(exist_ok=True)
    path.write_text(str(step))
    then = (time.time() if now is None else now) - age_s
    os.utime(path, (then, then))


def test_fresh_heartbeats_are_fine_and_a_stale_one_is_a_timeout(tmp_path):
    dog = Watchdog(tmp_path, 2, LIMITS)
    beat(tmp_path, 0, 4, age_s=1)
    beat(tmp_path, 1, 4, age_s=2)
    assert dog.check_heartbeats(time.time()) is None
    now = time.time()  # one clock reading: the reported age is exactly 15 s, however slow
    beat(tmp_path, 1, 3, age_s=15, now=now)
    kind, reason = dog.check_heartbeats(now)
    assert kind == "timeout" and reason.startswith("no progress for 15 s on rank 1")
    assert "last heartbeat at step 3" in reason


def test_a_rank_that_never_starts_is_a_timeout_after_the_startup_limit(tmp_path):
    dog = Watchdog(tmp_path, 2, LIMITS)
    beat(tmp_path, 0, -1, age_s=0)
    assert dog.check_heartbeats(time.time()) is None
    kind, reason = dog.check_heartbeats(time.time() + 31)
    assert kind == "timeout" and "rank 1 did not start" in reason


def test_a_rank_setting_up_is_held_to_the_startup_limit_not_the_stall_limit(tmp_path):
    # both ranks joined the process group (step -1) 15 s ago, still importing and building the
    # model on a loaded host: past the 10 s stall limit, within the 30 s start-up limit
    dog = Watchdog(tmp_path, 2, LIMITS)
    beat(tmp_path, 0, -1, age_s=15)
    beat(tmp_path, 1, -1, age_s=15)
    assert dog.check_heartbeats(time.time()) is None
    kind, reason = dog.check_heartbeats(time.time() + 31)
    assert kind == "timeout"
    assert reason == (
        "rank 0 did not reach its first step within limits.startup_timeout_s=30 "
        "(it joined the process group)"
    )


def test_signature_ignores_where_results_go_but_not_what_is_measured():
    base = {"strategy": {"name": "dp"}, "world_size": 2, "tracking": {"uri": "a"}}
    assert run_signature(base) == run_signature({**base, "tracking": {"uri": "b"}, "resume": True})
    assert run_signature(base) != run_signature({**base, "world_size": 4})
    assert len(run_signature(base)) == 16


def test_secrets_are_masked_in_keys_and_uris():
    tree = {
        "tracking": {"uri": "https://alice:s3cr3t@mlflow.example/x", "token": "abc"},
        "model": {"name": "tiny"},
        "hf_api_key": "hf_123",
    }
    masked = mask_tree(tree)
    assert masked["tracking"]["uri"] == "https://alice:***@mlflow.example/x"
    assert masked["tracking"]["token"] == "***" and masked["hf_api_key"] == "***"
    assert masked["model"] == {"name": "tiny"}
    assert "s3cr3t" not in mask_text("failed: postgresql://u:s3cr3t@db:5432/mlflow")


KEYS = st.sampled_from(
    [
        "world_size",
        "strategy.tp",
        "strategy.pp",
        "strategy.dp",
        "batch.micro_batch_size",
        "batch.grad_accum_steps",
        "batch.seq_len",
        "model.num_heads",
        "model.num_kv_heads",
        "model.num_layers",
        "model.hidden_size",
        "workload.num_steps",
        "workload.num_warmup_steps",
        "zero_stage",
        "fault.rank",
    ]
)
# Float keys also get the values a float parse lets through: nan, ±inf, a tiny positive.
FLOAT_KEYS = st.sampled_from(
    [
        "limits.timeout_s",
        "limits.startup_timeout_s",
        "limits.stall_timeout_s",
        "limits.max_mem_gib",
        "workload.lr",
    ]
)
FLOAT_VALUES = st.one_of(st.integers(-3, 70), st.sampled_from(["nan", "inf", "-inf", "1e-3"]))
OVERRIDES = st.lists(
    st.one_of(st.tuples(KEYS, st.integers(-3, 70)), st.tuples(FLOAT_KEYS, FLOAT_VALUES)),
    max_size=5,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    strategy=st.sampled_from(config_options("strategy")),
    model=st.sampled_from(config_options("model")),
    workload=st.sampled_from(config_options("workload")),
    overrides=OVERRIDES,
)
def test_validation_accepts_or_refuses_in_one_line_never_crashes(
    strategy, model, workload, overrides
):
    cfg = compose_config(
        [
            f"strategy={strategy}",
            f"model={model}",
            f"workload={workload}",
            *(f"{k}={v}" for k, v in dict(overrides).items()),
        ]
    )
    try:
        job = resolve_job(cfg, CONF_DIR)
    except ConfigError as err:
        message = str(err)
        assert message and "\n" not in message
        return
    layout = job.layout
    # strategy=single pins a model workload to one device whatever world_size the sweep asked
    # for; raw workloads (gemm, collectives) have no strategy and keep their world_size
    single = cfg.strategy.name == "single" and job.builds_model
    assert layout.world_size == (1 if single else cfg.world_size) >= 1
    assert job.world_size_requested == (cfg.world_size if single and cfg.world_size != 1 else None)
    assert layout.dp * layout.tp * layout.pp == layout.world_size
    assert (layout.zero_stage is None) == (job.engine != "deepspeed")
    for what in ("timeout_s", "startup_timeout_s", "stall_timeout_s"):
        assert math.isfinite(getattr(job.limits, what)) and getattr(job.limits, what) > 0
    if job.builds_model:
        assert math.isfinite(job.workload.lr) and job.workload.lr > 0
    assert Job.from_tree(job.tree()) == job  # what the ranks rebuild from resolved.yaml


def test_an_unwritable_output_dir_exits_with_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        require_writable(Path("/proc/distbench-cannot-write/job"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot write the output dir /proc/distbench-cannot-write" in err[0]


def test_more_cuda_ranks_than_gpus_is_refused():
    from distbench.orchestrator import MAX_RANKS_PER_CPU_CORE
    from distbench.probes.detect import num_cpu_cores

    cap = MAX_RANKS_PER_CPU_CORE * num_cpu_cores()  # CPU ranks: a few per core, no more
    assert device_shortfall("cpu", cap) is None
    assert device_shortfall("cpu", cap + 1).startswith(f"{cap + 1} ranks on this machine's")
    from distbench.probes.detect import gpu_names

    visible = len(gpu_names())
    message = device_shortfall("cuda", visible + 1)
    assert message.startswith(f"nproc_per_node({visible + 1}) > the {visible} CUDA device(s)")
