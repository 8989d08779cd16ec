"""Model states per device: parameters, gradients and optimizer states, by ZeRO stage and by
what each engine and precision recipe really allocates.

    python -c "from distbench.figures.model_states import *; print(state_bytes_per_param('bf16'))"

`zero_model_states_bytes` is the ZeRO paper's textbook figure (2 + 2 + 12 bytes/param,
Rajbhandari et al. 2020); `engine_state_terms` names every per-parameter buffer that torch
AdamW, DDP, FSDP2 and DeepSpeed's optimizers allocate where they differ from it (DeepSpeed's
own `estimate_zero2/zero3_model_states_mem_needs` agree within 15 %:
tests/unit/test_analytic_references.py pins it). Pure functions; bytes are per device.
"""

from __future__ import annotations

from dataclasses import dataclass

from distbench.figures.metrics import BYTES_PER_DTYPE
from distbench.precision import is_mixed


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of the model states: parameter, gradient, optimizer (K)."""

    param: int
    grad: int
    optimizer: int


def state_bytes_per_param(dtype: str) -> StateBytes:
    """Mixed precision (bf16/fp16) with Adam: 2 + 2 + K, K = 12 (fp32 master copy, momentum,
    variance; ZeRO paper section 3.1). Plain fp32 training has no master copy: 4 + 4 + 8."""
    if dtype == "fp32":
        return StateBytes(param=4, grad=4, optimizer=8)
    if dtype in ("bf16", "fp16"):
        return StateBytes(param=2, grad=2, optimizer=12)
    raise ValueError(f"dtype={dtype!r}; choose one of {list(BYTES_PER_DTYPE)}")


MIXED_ADAM = StateBytes(param=2, grad=2, optimizer=12)


def zero_model_states_bytes(
    num_params: float, dp: int, zero_stage: int, state: StateBytes = MIXED_ADAM
) -> dict[str, float]:
    """Model-state bytes per device under ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory
    Optimizations Toward Training Trillion Parameter Models", figure 1), Ψ params, Nd = dp:

        stage 0 (DDP)  (2 + 2 + K) Ψ
        stage 1        2Ψ + 2Ψ + KΨ/Nd          optimizer states sharded
        stage 2        2Ψ + (2 + K) Ψ/Nd        + gradients sharded
        stage 3        (2 + 2 + K) Ψ/Nd         + parameters sharded

    With 7.5B params on 64 devices the paper gives 120, 31.4, 16.6 and 1.9 GB. The textbook
    figure; what each engine really holds is `engine_state_terms`."""
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage={zero_stage}; choose 0, 1, 2 or 3")
    return {
        "params": state.param * num_params / (dp if zero_stage >= 3 else 1),
        "grads": state.grad * num_params / (dp if zero_stage >= 2 else 1),
        "optimizer": state.optimizer * num_params / (dp if zero_stage >= 1 else 1),
    }


NEVER = 4  # `sharded_from` of a buffer no ZeRO stage shards


@dataclass(frozen=True)
class StateTerm:
    """One per-parameter buffer an engine allocates: its name, the Memory field it counts in
    (params | grads | optimizer), bytes per parameter, the ZeRO stage from which it is split
    over the dp ranks (NEVER: whole on every rank), and whether it exists only inside the
    optimizer step (its bytes then compete with the activations for the peak, not add)."""

    name: str
    kind: str
    bytes_per_param: int
    sharded_from: int
    step_only: bool = False


def engine_state_terms(engine: str, dtype: str, precision: str, zero_stage: int) -> list[StateTerm]:
    """What each engine really allocates per parameter, by precision recipe (precision.py):
    `torch_state_terms` or `deepspeed_state_terms`."""
    if engine == "torch":
        return torch_state_terms(dtype, precision)
    if engine != "deepspeed":
        raise ValueError(f"engine={engine!r}; choose torch or deepspeed")
    return deepspeed_state_terms(dtype, precision, zero_stage)


def torch_state_terms(dtype: str, precision: str) -> list[StateTerm]:
    """The torch engine (single, ddp, torch_tp/pp; fsdp with zero_stage=3): torch AdamW keeps
    exp_avg and exp_avg_sq in the parameters' dtype (torch.optim.AdamW), gradients are the
    parameters' dtype. fp32 / bf16-pure: w + w + 2w with w = 4 or 2 (16 or 8 B); bf16-mixed:
    fp32 weights, grads and states (16 B), plus the bf16 copies autocast makes of every weight,
    which the backward keeps (torch.autocast's weight-cast cache; FSDP2 gathers bf16 instead,
    counted with its gathered layers). DDP's reducer adds its flat gradient buckets, a second
    copy of the gradients (DistributedDataParallel with gradient_as_bucket_view=False, the
    default): a buffer (`ddp_buckets`, figures/memory.py) when dp > 1. FSDP (stage 3)
    shards every term."""
    w = BYTES_PER_DTYPE[dtype]
    if is_mixed(dtype, precision):
        return [
            StateTerm("params_fp32", "params", 4, 3),
            StateTerm("autocast_weight_copies_bf16", "params", w, 3),
            StateTerm("grads_fp32", "grads", 4, 3),
            StateTerm("adam_exp_avg_fp32", "optimizer", 4, 3),
            StateTerm("adam_exp_avg_sq_fp32", "optimizer", 4, 3),
        ]
    return [
        StateTerm(f"params_{dtype}", "params", w, 3),
        StateTerm(f"grads_{dtype}", "grads", w, 3),
        StateTerm(f"adam_exp_avg_{dtype}", "optimizer", w, 3),
        StateTerm(f"adam_exp_avg_sq_{dtype}", "optimizer", w, 3),
    ]


def deepspeed_state_terms(dtype: str, precision: str, zero_stage: int) -> list[StateTerm]:
    """DeepSpeed, by ZeRO stage.

    fp32 (no bf16 block): ZeRO-0 is the client AdamW on fp32 weights (16 B); ZeRO-1/2
    (DeepSpeedZeroOptimizer) clone the fp32 partition as their master copy
    (`single_partition_of_fp32_groups`), so 4 + 4 + (4 + 8)/Nd at stage 1 (gradients whole
    until the boundary) and 4 + (4 + 4 + 8)/Nd at stage 2; ZeRO-3 likewise (4 + 4 + 4 + 8)/Nd.

    bf16-mixed (DeepSpeed's bf16 block): bf16 weights and gradients, fp32 master, exp_avg,
    exp_avg_sq, and an fp32 gradient: ZeRO-0 (DDP_BFLOAT16 wrapper) 2 + 2 + 12 = 16 B during
    forward/backward and the fp32 gradients (4 B) made inside the step; ZeRO-1 runs
    DeepSpeed's BF16_Optimizer with fp32 gradient accumulation (distbench's
    grad_accum_dtype=fp32): a whole fp32 gradient buffer, master and states / Nd; ZeRO-2/3:
    2 (stage 3: /Nd) + (2 + 4 + 4 + 8)/Nd, DeepSpeed's own count
    (`estimate_zero2_model_states_mem_needs`: "2 = params_16bit, 18 = 2_grads_16bit +
    4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit"), the fp32 gradient partition
    made at the step (ZeRO-3: for the optimizer sub-group, `sub_group_size`)."""
    if not is_mixed(dtype, precision):  # fp32
        terms = [
            StateTerm("params_fp32", "params", 4, 3),
            StateTerm("grads_fp32", "grads", 4, 2),
            StateTerm("adam_exp_avg_fp32", "optimizer", 4, 1),
            StateTerm("adam_exp_avg_sq_fp32", "optimizer", 4, 1),
        ]
        if zero_stage >= 1:
            terms.append(StateTerm("master_params_fp32", "optimizer", 4, 1))
        return terms
    w = BYTES_PER_DTYPE[dtype]
    terms = [
        StateTerm(f"params_{dtype}", "params", w, 3),
        StateTerm(f"grads_{dtype}", "grads", w, 2),
        StateTerm("master_params_fp32", "optimizer", 4, 1),
        StateTerm("adam_exp_avg_fp32", "optimizer", 4, 1),
        StateTerm("adam_exp_avg_sq_fp32", "optimizer", 4, 1),
    ]
    if zero_stage == 0:
        terms.append(StateTerm("grads_fp32_at_step", "grads", 4, NEVER, step_only=True))
    elif zero_stage == 1:
        terms.append(StateTerm("grads_fp32_accumulation", "grads", 4, NEVER))
    else:
        terms.append(StateTerm("grads_fp32_partition_at_step", "grads", 4, 1, step_only=True))
    return terms


def state_term_bytes(
    terms: list[StateTerm], num_params: float, dp: int, zero_stage: int
) -> dict[str, float]:
    """Bytes per device of each term: bytes_per_param × Ψ, divided by dp from its stage on."""
    return {
        t.name: t.bytes_per_param * num_params / (dp if zero_stage >= t.sharded_from else 1)
        for t in terms
    }


def deepspeed_host_bytes_per_node(
    num_params: float,
    ranks_per_node: int,
    num_nodes: int,
    *,
    zero_stage: int,
    offload_param: bool,
    buffer_factor: float = 1.5,
) -> float:
    """Host RAM per node an offload run needs, from DeepSpeed's own estimators
    (`estimate_zero3_model_states_mem_needs(cpu_offload=True, zero_init=True)`: 18Ψ/nodes·1.5
    with the parameters offloaded, 16Ψ/nodes·1.5 without, a figure per node;
    `estimate_zero2_model_states_mem_needs(cpu_offload=True)`: Ψ·max(4·N, 16)·1.5 with N all
    the job's devices, a figure for the whole job: 4 bytes per parameter for every rank, and
    the 16Ψ states, spread over the nodes, so divided by them here), 1.5 =
    additional_buffer_factor."""
    total_devices = ranks_per_node * num_nodes
    if zero_stage == 3:
        return num_params * (18 if offload_param else 16) / num_nodes * buffer_factor
    return num_params * max(4 * total_devices, 16) * buffer_factor / num_nodes
