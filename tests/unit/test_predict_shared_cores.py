"""The planner on the README's CPU grids (issue 26, item 8): ranks that time-share a host's
cores, tensor parallelism as distbench's engines run HF's layers (an all-reduce per
column-parallel module, DeepSpeed's gathered LM head), and the busiest pipeline stage.
Hand-computed cases on composed configs; no process starts."""

from __future__ import annotations

import dataclasses

import pytest

from distbench.figures import cpu_rss
from distbench.figures.communication import ring_all_reduce_bytes, ring_gather_bytes
from distbench.figures.job_terms import device_flops_per_token, device_shard
from distbench.figures.metrics import GIB
from distbench.figures.predict import pred_vs_measured, predict
from distbench.figures.step_time import cpu_oversubscription
from distbench.job import Job, resolve_job
from distbench.probes.threads import rank_threads
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

MEDIUM = ["model=tiny", "batch=medium", "hardware=cpu"]


def _cpu_job(overrides: list[str], host_cores: int | None = 2) -> Job:
    job = resolve_job(compose_config([*MEDIUM, *overrides]), CONF_DIR)
    hardware = dataclasses.replace(job.hardware, peak_tflops_fp32=0.08)
    return job.replace(hardware=hardware).with_measured(host_cores=host_cores)


def test_oversubscription_is_ranks_times_threads_over_cores():
    assert cpu_oversubscription(4, rank_threads(2, 4), 2) == 2.0
    assert cpu_oversubscription(2, rank_threads(2, 2), 2) == 1.0
    assert cpu_oversubscription(1, rank_threads(2, 1), 2) == 1.0  # one rank, two threads
    assert cpu_oversubscription(3, 2, 4) == 1.5  # OMP threads set by hand
    assert cpu_oversubscription(8, 1, None) == 1.0  # cores unknown: not assumed


def test_four_ranks_on_two_cores_take_twice_the_step_and_say_so():
    shared = predict(_cpu_job(["strategy=dp", "world_size=4"]))
    own = predict(_cpu_job(["strategy=dp", "world_size=4"], host_cores=4))
    assert shared.assumptions["oversubscription"] == 2.0
    assert own.assumptions["oversubscription"] == 1.0 and "oversubscribed" not in own.time_s
    assert shared.time_s["oversubscribed"] == pytest.approx(own.step_time_s)
    assert shared.step_time_s == pytest.approx(2 * own.step_time_s)
    assert shared.mem.total == own.mem.total  # the cores, not the memory, are shared
    logged = pred_vs_measured(_cpu_job(["strategy=dp", "world_size=4"]), {})
    assert logged["pred_oversubscription"] == 2.0
    assert "pred_oversubscription" not in pred_vs_measured(_cpu_job(["world_size=2"]), {})


def test_a_gpu_job_is_never_oversubscribed():
    job = resolve_job(compose_config(["hardware=h100_sxm", "world_size=8"]), CONF_DIR)
    assert predict(job.with_measured(host_cores=2)).assumptions["oversubscription"] == 1.0


def test_tensor_parallel_traffic_is_what_the_engines_send_per_layer():
    """Llama under tp=2: 2 row-parallel all-reduces in forward, 5 column-parallel input
    gradients in backward per layer; DeepSpeed's AutoTP head also gathers the logits and
    all-reduces its input gradient; torch_tp's vocab-parallel embedding and head all-reduce the
    embedding's output and the head's input gradient, and with strategy.vocab_parallel=false
    replicate both (no head traffic)."""
    b, s, h, v, layers, m = 4, 512, 256, 8192, 4, 4
    one = b * s * h * 4  # fp32 activations
    ds = predict(_cpu_job(["strategy=tp", "world_size=2"]))
    head = ring_gather_bytes(b * s * v * 4, 2) + ring_all_reduce_bytes(one, 2)
    assert ds.comm_bytes["tp"] == pytest.approx(m * (layers * 7 * one + head))
    torch_tp = predict(_cpu_job(["strategy=torch_tp", "world_size=2"]))
    split = 2 * ring_all_reduce_bytes(one, 2)
    assert torch_tp.comm_bytes["tp"] == pytest.approx(m * (layers * 7 * one + split))
    whole = predict(
        _cpu_job(["strategy=torch_tp", "world_size=2", "strategy.vocab_parallel=false"])
    )
    assert whole.comm_bytes["tp"] == pytest.approx(m * layers * 7 * one)
    # the replicated head runs whole on each tp rank: more compute than either split one
    assert whole.time_s["compute"] > 1.2 * ds.time_s["compute"]
    assert torch_tp.time_s["compute"] == pytest.approx(ds.time_s["compute"])


def test_the_last_pipeline_stage_sets_the_step_and_the_others_the_bubble():
    job = _cpu_job(["strategy=pp", "world_size=2"])
    shard = device_shard(job)
    last = device_flops_per_token(job, shard)
    whole = device_flops_per_token(job, shard, whole_pipeline=True)
    assert whole / 2 < last < whole  # the last stage holds the LM head
    pp = predict(job)
    single = predict(_cpu_job(["strategy=single", "world_size=1"]))
    assert pp.time_s["compute"] == pytest.approx(single.time_s["compute"] * last / whole)
    m = job.batch.grad_accum_steps
    assert pp.time_s["bubble"] == pytest.approx(pp.time_s["compute"] * (whole - last) / last / m)


def test_a_cpu_ranks_rss_keeps_one_micro_batchs_heap_activations_and_sharding_adds_some():
    fraction = cpu_rss.CPU_HEAP_RETENTION_OF_ACTIVATIONS
    # batch=medium: tiny's fp32 logits are 4 x 512 x 8192 x 4 B = 64 MiB, their own mmap (not
    # kept); at 2 x 128 (8 MiB) they come from the heap like the layers' activations
    for batch, logits_kept in (([], False), (["batch=small"], True)):
        dp, zero3 = (
            predict(_cpu_job([f"strategy={s}", "world_size=2", *batch])).mem
            for s in ("dp", "zero3")
        )
        for mem in (dp, zero3):  # one micro-batch in flight: its activations churn the heap
            heap = mem.activations - (0 if logits_kept else mem.terms["activations_logits"])
            assert mem.terms["cpu_heap_retained"] == pytest.approx(fraction * heap)
        assert "cpu_sharded_runtime" not in dp.terms
        assert zero3.terms["cpu_sharded_runtime"] == cpu_rss.CPU_SHARDED_RUNTIME_GIB * GIB
        process = ("runtime", "cpu_heap_retained", "cpu_sharded_runtime")
        assert zero3.runtime == pytest.approx(sum(zero3.terms[k] for k in process))
    # a pipeline stage holds several micro-batches' activations; the heap keeps one's share
    pp4, pp2 = (
        predict(_cpu_job(["strategy=torch_pp", "world_size=2", f"batch.grad_accum_steps={m}"])).mem
        for m in (4, 2)
    )  # GPipe: every micro-batch's activations held at once
    assert pp4.activations > 1.5 * pp2.activations
    assert pp4.terms["cpu_heap_retained"] == pytest.approx(pp2.terms["cpu_heap_retained"])
    gpu = resolve_job(compose_config(["hardware=h100_sxm", "strategy=zero3"]), CONF_DIR)
    assert not {"cpu_heap_retained", "cpu_sharded_runtime"} & set(predict(gpu).mem.terms)


def test_only_tensors_under_glibcs_largest_mmap_threshold_come_from_its_heap():
    terms = {"activations_layers": 5.0, "activations_logits": 7.0, "backward_grad_transient": 1.0}
    limit = cpu_rss.GLIBC_MMAP_THRESHOLD_MAX_BYTES
    small = {"layer": limit - 1, "activations_logits": limit - 1, "backward_grad_transient": 1}
    assert cpu_rss.heap_activation_bytes(terms, small) == 13.0
    big_logits = {**small, "activations_logits": limit}
    assert cpu_rss.heap_activation_bytes(terms, big_logits) == 6.0
    # a term without its own tensor size is a layer's (activations_recompute, ...)
    wide_layers = {**small, "layer": 2 * limit}
    assert cpu_rss.heap_activation_bytes(terms, wide_layers) == 8.0


def test_a_ring_across_nodes_runs_at_the_nodes_nics_a_pipeline_send_at_one():
    overrides = ["hardware=a100_80gb", "model=llama3_8b", "strategy=3d", "strategy.pp=8"]
    sizes = ["world_size=32", "num_nodes=4", "batch.grad_accum_steps=8"]
    job = resolve_job(compose_config([*overrides, *sizes]), CONF_DIR)
    # 8 ranks per node, tp 2 inside one; the dp and pp groups span nodes
    links = predict(job).assumptions
    nic = job.hardware.internode_gbytes_per_s
    assert links["link_gbytes_per_s"]["dp"] == min(8 * nic, job.hardware.interconnect_gbps)
    assert links["link_gbytes_per_s"]["pp"] == nic
    assert links["link_gbytes_per_s"]["tp"] == job.hardware.interconnect_gbps


def test_the_reports_prediction_table_says_whether_cores_were_shared():
    import pandas as pd

    from distbench.tools.report.tables import pred_vs_measured as table

    runs = pd.DataFrame(
        {
            "status": ["FINISHED", "FINISHED"],
            "run_name": ["dp-ws2", "dp-ws4"],
            "pred_step_time_s": [6.45, 13.0],
            "step_time_s_p50": [6.97, 12.2],
            "oversubscribed": [None, "true"],
            "pred_oversubscription": [None, 2.0],
        }
    )
    out = table(runs)
    assert list(out["oversubscribed"].fillna("")) == ["", "true"]
    assert out["pred_oversubscription"].iloc[1] == 2.0
    assert out["time_pred_rel_err"].iloc[1] == pytest.approx((13.0 - 12.2) / 12.2)


def test_checkpointing_saves_a_cpu_rank_its_saved_activations_not_its_heap():
    """A checkpointed forward and its recompute allocate what an uncheckpointed micro-batch
    saves, a layer at a time: glibc keeps as much heap. Measured on the 2-core host
    (batch=medium, 2 ranks): full checkpointing cut ddp's RSS by 151 MiB, zero2's by 158, where
    the saved activations fell by 150; predicted now 1.057 -> 0.910 GiB against 1.051 -> 0.900
    (it was 0.773 when the heap was priced from the checkpointed activations: -14 %)."""
    for strategy in ("ddp", "zero2"):
        none, full = (
            predict(_cpu_job([f"strategy={strategy}", "world_size=2", *ac])).mem
            for ac in ([], ["activation_checkpointing=full"])
        )
        assert full.terms["cpu_heap_retained"] == pytest.approx(none.terms["cpu_heap_retained"])
        saved = none.terms["activations_layers"] - full.terms["activations_layers"]
        assert none.total - full.total == pytest.approx(saved)
