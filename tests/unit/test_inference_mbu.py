"""workload=inference's memory-bandwidth utilisation (metrics.py: decode_bytes, MBU) by hand,
declared beside MFU, and inference.cuda_graph's default: on wherever it runs, settled in the Job
(its tree, resolved.yaml and signature hold a bool).

    pytest tests/unit/test_inference_mbu.py
"""

from __future__ import annotations

import pytest

from distbench.job import resolve_job
from distbench.workloads import metric_catalog
from distbench.workloads.inference import SPEC
from distbench.workloads.inference import metrics as im
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

# N = 1000 matmul parameters, L = 2 layers, d_kv = 4, P = 4 prompt tokens, n = 3 new, B = 2
N, L, KV, P = 1000, 2, 4, 4


def test_decode_bytes_by_hand():
    # steps j = 1, 2 read the weights (4 bytes each) and K, V at 5 and 6 keys per sequence:
    # 2·1000·4 + 2 sequences · 2·2·4·4 bytes · (5 + 6)
    assert im.decode_bytes(N, L, KV, P, 3, 2, 4) == 8000 + 2 * 64 * 11
    assert im.decode_bytes(N, L, KV, P, 1, 2, 4) == 0  # no decode step
    assert im.mbu_pct(1.5e12, 3000.0) == pytest.approx(50.0)  # 1.5 TB/s of 3 TB/s


def test_decode_bandwidth_metrics_by_hand():
    common = dict(
        decode_times_s=[0.5, 0.5],  # two timed batches, 1 s of decode
        num_matmul_params=N,
        num_layers=L,
        kv_dim=KV,
        prompt_len=P,
        num_new_tokens=3,
        batch_size=2,
        dp=2,
        world_size=4,  # tp 2: a replica's bytes over its 2 devices
        dtype="fp32",
    )
    per_device = 2 * 9408 * 2 / 1.0 / 4  # dp × bytes per batch × batches / s / devices
    m = im.decode_bandwidth_metrics(**common, mem_bandwidth_gbps=1e-6)  # 1 kB/s
    assert m["decode_mem_gbytes_per_s"] == pytest.approx(per_device / 1e9)
    assert m["mbu_pct"] == pytest.approx(100 * per_device / 1e3)
    assert "mbu_pct" not in im.decode_bandwidth_metrics(**common, mem_bandwidth_gbps=None)  # CPU


def test_mbu_is_declared_beside_mfu():
    names = [m.name for m in SPEC.metrics]
    assert names[names.index("mfu_pct") + 1] == "mbu_pct"
    assert metric_catalog()["mbu_pct"].goal == "max"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["hardware=h100_sxm", "strategy=dp"], True),  # where it runs: on by default
        (["hardware=h100_sxm", "strategy=tp"], False),  # AutoTP: eager
        (["hardware=h100_sxm", "workload.num_warmup_steps=0"], False),  # nothing to compile in
        (["hardware=cpu"], False),
        (["hardware=h100_sxm", "inference.cuda_graph=false"], False),  # asked: eager
    ],
)
def test_cuda_graph_is_on_by_default_where_it_runs(overrides, expected):
    cfg = compose_config(["workload=inference", "tracking=none", *overrides])
    job = resolve_job(cfg, CONF_DIR)
    assert job.options.cuda_graph is expected
    assert job.tree()["inference"]["cuda_graph"] is expected
