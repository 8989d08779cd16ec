"""Communication of a training layout: bytes each device sends per optimizer step per parallel
group (dp / tp / pp), the collectives that carry them, the link each group runs on, and their
time by the α-β model.

    python -c "from distbench.figures.communication import *; print(ring_all_reduce_bytes(1e9, 8))"

A group within a node runs on hardware.interconnect_gbps (NVLink); one that crosses nodes on
hardware.internode_gbytes_per_s (the NIC per GPU); with hardware.link_source=measured, the
store's collectives fits (figures/links.py) come first. What of this time hides under compute
is figures/step_time.py's `hidden_comm_s`. Pure functions; bytes per device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distbench.job import Layout

GB = 1e9  # the β of the α-β model is in GB/s, 1e9 bytes/s
# Per-collective latency (the α of the α-β model). NCCL: ~10 µs within a node (nccl-tests
# small-message times). CPU ranks (gloo over loopback TCP): 1.5 ms a collective inside a step,
# where the ranks reach it at different times on shared cores; an idle pair ~0.3 ms.
# Profiled, with the rate below: benchmarks/cpu_runs/2026-11-28_gloo_in_step/.
DEFAULT_LATENCY_S = {"cuda": 10e-6, "cpu": 1.5e-3}
# Link between ranks when hardware.interconnect_gbps is unset: CPU ranks on one host talk
# gloo over loopback TCP, 1.3-1.6 GB/s bus bandwidth inside a step (1.6-2.0 idle).
DEFAULT_CPU_INTERCONNECT_GBPS = 1.5
# DeepSpeed's zero_optimization defaults where a run's block leaves a key out (DeepSpeed docs,
# "ZeRO optimizations"; conf/ds_zero/*.yaml sets its own).
DEEPSPEED_ZERO_DEFAULTS = {
    "reduce_bucket_size": 5e8,
    "allgather_bucket_size": 5e8,
    "stage3_prefetch_bucket_size": 5e7,
    "stage3_max_live_parameters": 1e9,
    "stage3_param_persistence_threshold": 1e5,
}
# DeepSpeed ZeRO-0 all-reduces the gradients in flat buffers of this many elements
# (engine.allreduce_gradients: buffered_allreduce_fallback's elements_per_buffer).
DEEPSPEED_ZERO0_BUFFER_ELEMENTS = 500_000_000
# DDP's gradient bucket (torch.nn.parallel.DistributedDataParallel bucket_cap_mb=25).
DDP_BUCKET_BYTES = 25 * 1024**2
GROUPS = ("dp", "tp", "pp")
# Tensor-parallel all-reduces of one micro-batch's b·s·h activations per decoder layer, as
# distbench's engines run HF's layers: the row-parallel outputs in forward (attention o_proj,
# MLP down_proj: 2) and, in backward, the input gradient of every column-parallel module on
# its own (DeepSpeed AutoTP's LinearLayer: ColumnParallel.backward; torch's ColwiseParallel
# from a Replicate input): Llama's unfused q, k, v, gate and up (5), GPT-2's fused c_attn and
# c_fc (2). Megatron-LM fuses them: 2 + 2 (Shoeybi et al. 2019, figure 4), the default here.
TP_ALL_REDUCES_PER_LAYER = {"llama": 7, "gpt2": 4}
MEGATRON_TP_ALL_REDUCES_PER_LAYER = 4


def ring_all_reduce_bytes(num_bytes: float, n: int) -> float:
    """Bytes each rank sends in a ring all-reduce of `num_bytes`: 2·(n−1)/n · num_bytes
    (Patarasuk & Yuan 2009; nccl-tests doc/PERFORMANCE.md, the bus-bandwidth factor)."""
    return 2.0 * (n - 1) / n * num_bytes


def ring_gather_bytes(num_bytes: float, n: int) -> float:
    """Bytes each rank sends in a ring all-gather or reduce-scatter: (n−1)/n · num_bytes."""
    return (n - 1) / n * num_bytes


def dp_comm_bytes(
    shard_params: float,
    dp: int,
    zero_stage: int,
    *,
    grad_bytes: int,
    param_bytes: int,
    grad_accum_steps: int = 1,
    reduce_scatter_as_all_reduce: bool = False,
) -> float:
    """Data-parallel bytes sent per device per optimizer step (ZeRO paper, section 7):

        stage 0   all-reduce of the gradients          2Ψ(n−1)/n        once per step
        stage 1   reduce-scatter + all-gather params   2Ψ(n−1)/n        once per step
        stage 2   reduce-scatter every micro-step + all-gather params once
        stage 3   per micro-step: all-gather params in forward and in backward +
                  reduce-scatter grads: 3Ψ(n−1)/n = 1.5× DP

    Ψ in elements × bytes per element. With one micro-step all of this is the paper's; with
    gradient accumulation DeepSpeed reduces stage 2/3 gradients in every backward (they are
    partitioned), and stage 0/1 only at the accumulation boundary; FSDP under the torch
    engine as stage 3. gloo has no reduce-scatter: the engines all-reduce
    (`reduce_scatter_as_all_reduce`, the traces' gloo:all_reduce), twice the bytes."""
    if dp == 1:
        return 0.0
    grads, params = shard_params * grad_bytes, shard_params * param_bytes
    m = grad_accum_steps
    reduce = (ring_all_reduce_bytes if reduce_scatter_as_all_reduce else ring_gather_bytes)(
        grads, dp
    )
    if zero_stage == 0:
        return ring_all_reduce_bytes(grads, dp)
    if zero_stage == 1:
        return reduce + ring_gather_bytes(params, dp)
    if zero_stage == 2:
        return m * reduce + ring_gather_bytes(params, dp)
    return m * (2 * ring_gather_bytes(params, dp) + reduce)


def tp_comm_bytes(
    tp: int,
    num_layers_local: float,
    micro_batch_size: int,
    seq_len: int,
    hidden_size: int,
    *,
    act_bytes: int,
    grad_accum_steps: int = 1,
    all_reduces_per_layer: int = MEGATRON_TP_ALL_REDUCES_PER_LAYER,
    head_vocab: int = 0,
    vocab_parallel: bool = False,
) -> float:
    """Tensor-parallel bytes per device per step: `all_reduces_per_layer` all-reduces of b·s·h
    per layer per micro-batch (Megatron-LM's 4: 2 in forward, after attention and after the
    MLP, 2 in backward; Shoeybi et al. 2019, section 3 and figure 4; HF's unfused layers:
    TP_ALL_REDUCES_PER_LAYER), ring factor 2(t−1)/t. `head_vocab` > 0: the LM head is
    column-parallel with its output gathered (DeepSpeed AutoTP's training head,
    LinearLayer(gather_output=True)): an all-gather of the b·s·vocab logits in forward and an
    all-reduce of its b·s·h input gradient in backward. `vocab_parallel`: the embedding and
    head split by vocabulary, the logits left split (Megatron's, the torch engine's): an
    all-reduce of the embedding's b·s·h output in forward and of the head's input gradient in
    backward (the loss's own all-reduces carry b·s floats: left out)."""
    if tp == 1:
        return 0.0
    one = micro_batch_size * seq_len * hidden_size * act_bytes
    per_micro = num_layers_local * all_reduces_per_layer * ring_all_reduce_bytes(one, tp)
    if head_vocab:
        logits = micro_batch_size * seq_len * head_vocab * act_bytes
        per_micro += ring_gather_bytes(logits, tp) + ring_all_reduce_bytes(one, tp)
    if vocab_parallel:
        per_micro += 2 * ring_all_reduce_bytes(one, tp)
    return grad_accum_steps * per_micro


def pp_comm_bytes(
    pp: int, micro_batch_size: int, seq_len: int, hidden_size: int, *, act_bytes: int, num_micro
) -> float:
    """Pipeline bytes a middle stage sends per step: per micro-batch its b·s·h activations
    forward and their gradient backward (GPipe / PipeDream point-to-point)."""
    if pp == 1:
        return 0.0
    return 2.0 * num_micro * micro_batch_size * seq_len * hidden_size * act_bytes


def comm_bytes_per_group(
    layout: Layout,
    shard_params: float,
    layers_local: float,
    *,
    micro_batch_size: int,
    seq_len: int,
    hidden_size: int,
    grad_bytes: int,
    param_bytes: int,
    act_bytes: int,
    grad_accum_steps: int,
    tp_all_reduces_per_layer: int = MEGATRON_TP_ALL_REDUCES_PER_LAYER,
    tp_head_vocab: int = 0,
    tp_vocab_parallel: bool = False,
    reduce_scatter_as_all_reduce: bool = False,
) -> dict[str, float]:
    """Bytes one device sends per step in each group: `dp_comm_bytes` (with its gloo switch),
    `tp_comm_bytes` (with its all-reduces per layer, its gathered head's vocabulary or its
    vocab-parallel embedding and head), `pp_comm_bytes`."""
    b, s, h, m = micro_batch_size, seq_len, hidden_size, grad_accum_steps
    return {
        "dp": dp_comm_bytes(
            shard_params,
            layout.dp,
            layout.zero_stage,
            grad_bytes=grad_bytes,
            param_bytes=param_bytes,
            grad_accum_steps=m,
            reduce_scatter_as_all_reduce=reduce_scatter_as_all_reduce,
        ),
        "tp": tp_comm_bytes(
            layout.tp,
            layers_local,
            b,
            s,
            h,
            act_bytes=act_bytes,
            grad_accum_steps=m,
            all_reduces_per_layer=tp_all_reduces_per_layer,
            head_vocab=tp_head_vocab,
            vocab_parallel=tp_vocab_parallel,
        ),
        "pp": pp_comm_bytes(layout.pp, b, s, h, act_bytes=act_bytes, num_micro=m),
    }


def zero_setting(zero_block: dict[str, Any] | None, key: str) -> float:
    """A zero_optimization value of the run, else DeepSpeed's default (DEEPSPEED_ZERO_DEFAULTS)."""
    return float((zero_block or {}).get(key, DEEPSPEED_ZERO_DEFAULTS[key]))


def zero3_gathered_per_layer(matrix_sizes: list[float], tp: int, threshold: float) -> int:
    """The weight matrices of a layer ZeRO-3 partitions and so gathers: those above
    stage3_param_persistence_threshold elements (a smaller one stays whole on every rank)."""
    return sum(1 for n in matrix_sizes if n / tp > threshold)


def dp_collectives(
    layout: Layout,
    shard_params: float,
    layers_local: float,
    grad_accum_steps: int,
    zero_block: dict[str, Any] | None,
    *,
    data_parallel: str | None,
    grad_bytes: int,
    gathered_per_layer: int,
    stays_gathered: bool,
) -> float:
    """Data-parallel collectives per step, as the engines issue them (counted in profiler
    traces of CPU ranks: gloo's per-collective annotations, benchmarks/cpu_runs/
    2026-11-28_gloo_in_step/):
    - DDP: one all-reduce per 25 MiB gradient bucket, in the last micro-batch;
    - FSDP2 (fully_shard per layer and the root): per micro-batch the root and each layer
      gathered in forward, each layer again in backward, and one reduction per group;
    - DeepSpeed ZeRO-0: one flat all-reduce per 5e8 elements; ZeRO-1/2/3 one reduction per
      reduce_bucket_size bucket (ZeRO-2/3 in every micro-batch), one all-reduce of the
      gradient norm, ZeRO-1/2 the updated partitions' all-gather; ZeRO-3 gathers each
      partitioned matrix (`gathered_per_layer`) and the embedding in forward and in backward,
      in every micro-batch, except where the whole model stays gathered
      (`stays_gathered`: the parameters under stage3_max_live_parameters), where the later
      micro-batches gather the embedding alone."""
    if layout.dp == 1:
        return 0.0
    m, layers = grad_accum_steps, layers_local
    if data_parallel == "ddp":
        return float(math.ceil(shard_params * grad_bytes / DDP_BUCKET_BYTES))
    if data_parallel == "fsdp":
        return m * (3 * layers + 2)  # (L + 1) + L gathers, L + 1 reductions
    if layout.zero_stage == 0:
        return float(math.ceil(shard_params / DEEPSPEED_ZERO0_BUFFER_ELEMENTS))
    buckets = math.ceil(shard_params / zero_setting(zero_block, "reduce_bucket_size"))
    reductions = buckets * (1 if layout.zero_stage == 1 else m) + 1  # + the norm's
    if layout.zero_stage < 3:
        return float(reductions + 1)  # + the updated partitions' all-gather
    per_pass = gathered_per_layer * layers + 1  # + the embedding
    gathers = 2 * per_pass + (m - 1) if stays_gathered else 2 * m * per_pass
    return float(reductions + gathers)


def collectives_per_group(
    layout: Layout,
    dp_collectives_per_step: float,
    layers_local: float,
    grad_accum_steps: int,
    tp_all_reduces_per_layer: int = MEGATRON_TP_ALL_REDUCES_PER_LAYER,
    tp_head_collectives: int = 0,
) -> dict[str, float]:
    """Collectives per step in each group, each paying the latency α once: dp's
    (`dp_collectives`); tp `tp_all_reduces_per_layer` all-reduces per layer per micro-batch
    plus the head's (`tp_head_collectives`: job_terms.tp_head_collectives); pp a send forward
    and one backward per micro-batch."""
    m = grad_accum_steps
    tp_per_micro = tp_all_reduces_per_layer * layers_local + tp_head_collectives
    return {
        "dp": float(dp_collectives_per_step),
        "tp": tp_per_micro * m * (layout.tp > 1),
        "pp": 2.0 * m * (layout.pp > 1),
    }


def comm_time_s(
    num_bytes: float, bandwidth_gbps: float, num_collectives: float = 0, latency_s: float = 0.0
) -> float:
    """α-β model (Hockney 1994): num_collectives·α + bytes / β, β in GB/s (1e9 bytes/s)."""
    return num_collectives * latency_s + num_bytes / (bandwidth_gbps * GB)


def default_latency_s(device: str) -> float:
    """The assumed latency of one collective (s) when neither a flag nor a fit gives one."""
    return DEFAULT_LATENCY_S.get(device, 10e-6)


def group_spans_nodes(group: str, layout: Layout, ranks_per_node: int) -> bool:
    """Whether a dp, tp or pp group crosses a node boundary. Ranks are
    arange(world).view(dp, pp, tp), tp fastest (engines/__init__.py): a tp group is tp
    consecutive ranks, a pp group spans tp·pp ranks, a dp group the whole world; nodes hold
    ranks_per_node consecutive ranks."""
    size = {"dp": layout.dp, "tp": layout.tp, "pp": layout.pp}[group]
    span = {"dp": layout.world_size, "tp": layout.tp, "pp": layout.tp * layout.pp}[group]
    return size > 1 and span > ranks_per_node


def hardware_internode_gbytes_per_s(hardware: Any) -> float | None:
    """The inter-node link per device in GB/s (hardware.internode_gbytes_per_s: its NIC), None
    if the catalog entry has none. A ring whose group crosses nodes is bounded by its slowest
    hops (Patarasuk & Yuan 2009), which a node's channels spread over all its NICs
    (`ring_internode_gbytes_per_s`)."""
    value = getattr(hardware, "internode_gbytes_per_s", None)
    return None if value is None else float(value)


def ring_internode_gbytes_per_s(
    nic_gbytes_per_s: float, ranks_per_node: int, intra_gbps: float
) -> float:
    """A device's bus bandwidth in a ring collective whose group spans nodes, one NIC per
    device: NCCL runs one ring per channel and spreads the channels over the node's NICs, so
    only one hop per node and channel crosses the network and each NIC carries 1/ranks_per_node
    of the bytes a device sends; the ring then runs at the node's aggregate rate (NIC ×
    ranks per node), up to the intra-node link its other hops take."""
    return min(intra_gbps, nic_gbytes_per_s * max(ranks_per_node, 1))


@dataclass(frozen=True)
class Links:
    """The links a layout's groups run on: the intra-node rate (GB/s), the inter-node one
    (None: one node only), the latency α of one collective (s), and each group's rate."""

    intra_gbps: float
    internode_gbytes_per_s: float | None
    latency_s: float
    per_group: dict[str, float]


def resolve_links(
    hardware: Any,
    measured: Any,
    layout: Layout,
    ranks_per_node: int,
    device: str,
    *,
    bandwidth_gbps: float | None = None,
    latency_s: float | None = None,
) -> Links:
    """Each group's link: the flag (`bandwidth_gbps`, `latency_s`) first, then with
    hardware.link_source=measured the store's fits (`measured`, probes/parts.py Measurements:
    measured_interconnect_gbps, measured_internode_gbytes_per_s, link_latency_us), then the
    catalog, then the CPU default (DEFAULT_CPU_INTERCONNECT_GBPS, DEFAULT_LATENCY_S). A group
    that spans nodes runs on the inter-node link when one is known: a pipeline's sends on one
    device's NIC, a ring collective at `ring_internode_gbytes_per_s` (a measured fit is the
    collective's own bus bandwidth already)."""
    fitted = hardware.link_source == "measured"
    bw = (
        bandwidth_gbps
        or (fitted and measured.measured_interconnect_gbps)
        or hardware.interconnect_gbps
        or DEFAULT_CPU_INTERCONNECT_GBPS
    )
    internode_fit = fitted and measured.measured_internode_gbytes_per_s
    internode = internode_fit or hardware_internode_gbytes_per_s(hardware)
    ring_internode = internode_fit or (
        internode and ring_internode_gbytes_per_s(internode, ranks_per_node, float(bw))
    )
    alpha = latency_s
    if alpha is None:
        measured_us = measured.link_latency_us if fitted else None
        alpha = measured_us * 1e-6 if measured_us is not None else default_latency_s(device)
    spans = {g: group_spans_nodes(g, layout, ranks_per_node) for g in GROUPS}
    across = {"dp": ring_internode, "tp": ring_internode, "pp": internode}
    link = {g: float(across[g] if spans[g] and across[g] else bw) for g in spans}
    return Links(
        intra_gbps=float(bw), internode_gbytes_per_s=internode, latency_s=alpha, per_group=link
    )


def comm_s_per_group(
    comm_bytes: dict[str, float], collectives: dict[str, float], links: Links
) -> dict[str, float]:
    """Each group's communication time on its link (`comm_time_s`), none of it hidden."""
    return {
        g: comm_time_s(comm_bytes[g], links.per_group[g], collectives[g], links.latency_s)
        for g in comm_bytes
    }
