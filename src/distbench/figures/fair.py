"""Fair comparisons of a grid's rows: the layout as `dp×tp×pp`, the tokens each optimizer step
consumes, and which rows a "best" may compare. Pure; the tables (tools/summary.py,
tools/report/, tools/plan/) and the sweep's parent run (tracking/parent.py) all use this rule.

The rule: a run with more tokens per step (a bigger global batch: more data-parallel replicas,
a bigger micro batch or more accumulation) amortises its fixed costs over more tokens, so
throughput and step time only compare at one number of tokens per step. A figure of the whole
job (step time, tokens/s, TFLOP/s of all devices) also grows with the devices, so it compares
only within one world size; a figure per device (tokens/s or TFLOP/s per device, MFU, peak
memory per device, cost per token) compares across world sizes. When the rows differ in tokens
per step, every figure compares only among rows of the same world size and tokens per step.
`batch.global_batch_tokens` (job.py) runs every layout at one global batch, so a grid compares
whole.

    python -c "from distbench.figures.fair import *; print(layout_label(2, 1, 1))"
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

# Figures normalised per device (or per token, or per dollar's worth of tokens): comparable
# across world sizes at one number of tokens per step. Any other figure is the whole job's.
PER_DEVICE_METRICS = frozenset(
    {
        "tflops_per_device",
        "mfu_pct",
        "peak_mem_gib",
        "init_mem_gib",
        "cost_usd_per_1m_tokens",
        "throughput_tokens_per_s_per_device",
    }
)


def per_device(metric: str) -> bool:
    """Whether a metric is normalised per device (PER_DEVICE_METRICS, or `_per_device` in its
    name): comparable across world sizes."""
    return metric in PER_DEVICE_METRICS or "_per_device" in metric


def layout_label(dp: Any, tp: Any = 1, pp: Any = 1) -> str:
    """The rank grid as tables show it: `2×1×1` (dp × tp × pp)."""
    return f"{int(dp)}×{int(tp)}×{int(pp)}"


def layout_of(row: Mapping[str, Any]) -> str | None:
    """A row's layout label from what it carries: an outcome's `layout` {dp, tp, pp}, or train's
    `layout_tag` tag (`dp2-pp1-tp2`); None when it has neither (a config refused before it
    resolved)."""
    layout = row.get("layout")
    if isinstance(layout, Mapping) and layout.get("dp") is not None:
        return layout_label(layout["dp"], layout.get("tp", 1), layout.get("pp", 1))
    if isinstance(layout, str) and layout:
        return layout
    tag = row.get("layout_tag")
    if isinstance(tag, str) and tag:
        degrees = {part[:2]: part[2:] for part in tag.split("-")}
        if all(degrees.get(d, "").isdigit() for d in ("dp", "tp", "pp")):
            return layout_label(degrees["dp"], degrees["tp"], degrees["pp"])
    return None


def tokens_per_step_of(metrics: Mapping[str, Any]) -> float | None:
    """Tokens per optimizer step of a run from its metrics: train's `tokens_per_step`, or an
    inference step's prompt and generated tokens; None when it logged neither."""
    value = metrics.get("tokens_per_step")
    if _number(value):
        return float(value)
    prompt = metrics.get("tokens_prompt_per_step")
    generated = metrics.get("tokens_generated_per_step")
    if _number(prompt) and _number(generated):
        return float(prompt) + float(generated)
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def tokens_differ(tokens: Sequence[float | None]) -> bool:
    """Whether the rows that know their tokens per step hold more than one value."""
    return len({t for t in tokens if t is not None}) > 1


def comparable_keys(
    world_sizes: Sequence[Hashable], tokens: Sequence[float | None], per_device_figure: bool
) -> list[tuple[Hashable, ...]]:
    """Each row's comparison group (the module's rule): (tokens per step, world size), or
    (tokens per step,) for a per-device figure while every row has the same tokens per step."""
    across_sizes = per_device_figure and not tokens_differ(tokens)
    return [
        (tok,) if across_sizes else (tok, ws) for ws, tok in zip(world_sizes, tokens, strict=True)
    ]


def best_per_group(
    values: Sequence[float | None], keys: Sequence[Hashable], goal: str
) -> dict[Hashable, int]:
    """{group key: index of its best value} (goal "min" or "max"); rows without a value are
    left out, the first of equal values wins."""
    best: dict[Hashable, int] = {}
    for i, (value, key) in enumerate(zip(values, keys, strict=True)):
        if not _number(value):
            continue
        held = best.get(key)
        if held is None or (value < values[held] if goal == "min" else value > values[held]):
            best[key] = i
    return best


def group_label(key: tuple[Hashable, ...]) -> str:
    """A comparison group as text: `world_size 2, 1,024 tokens/step` (or the parts it has)."""
    tokens = key[0] if key else None
    parts = [f"world_size {_plain(key[1])}"] if len(key) > 1 and key[1] is not None else []
    if tokens is not None:
        parts.append(f"{tokens_text(tokens)} tokens/step")
    return ", ".join(parts) or "every run"


def tokens_text(tokens: float | None) -> str:
    """Tokens per step as tables print them: `1,024`; `-` when unknown."""
    return "-" if tokens is None else f"{tokens:,.0f}"


def _plain(value: Any) -> str:
    return str(int(value)) if _number(value) and float(value).is_integer() else str(value)


def fairness_note(world_sizes: Sequence[Hashable], tokens: Sequence[float | None]) -> str | None:
    """The line that says how a table's bests were picked, or None when every row compares with
    every other (one world size, one number of tokens per step)."""
    known = sorted({t for t in tokens if t is not None})
    if len(known) > 1:
        return (
            f"runs differ in tokens per step ({tokens_text(known[0])} to {tokens_text(known[-1])}):"
            " each best is among runs of the same world size and tokens per step; "
            f"batch.global_batch_tokens={known[-1]:.0f} runs every layout at one global batch"
        )
    if len({ws for ws in world_sizes if ws is not None}) > 1:
        return (
            "runs differ in world size: each best of a whole-job figure (step time, tokens/s) "
            "is per world size; per-device figures compare across world sizes"
        )
    return None


def grad_accum_for_global_batch(
    global_batch_tokens: int, micro_batch_size: int, dp: int, seq_len: int
) -> int:
    """The micro-steps per optimizer step that make micro_batch_size × grad_accum × dp × seq_len
    equal global_batch_tokens (batch.global_batch_tokens), or ValueError, one line with the
    numbers, when no whole number of micro-steps does."""
    for key, value in (
        ("batch.global_batch_tokens", global_batch_tokens),
        ("batch.micro_batch_size", micro_batch_size),
        ("batch.seq_len", seq_len),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{key}={value!r} must be a positive integer")
    per_micro_step = micro_batch_size * dp * seq_len
    if global_batch_tokens % per_micro_step:
        below = global_batch_tokens // per_micro_step * per_micro_step
        near = " or ".join(str(n) for n in (below, below + per_micro_step) if n)
        raise ValueError(
            f"batch.global_batch_tokens={global_batch_tokens} is not a multiple of "
            f"micro_batch_size({micro_batch_size}) x dp({dp}) x seq_len({seq_len}) = "
            f"{per_micro_step} tokens per micro-step; use {near}, or another "
            "batch.micro_batch_size"
        )
    return global_batch_tokens // per_micro_step


# The run params (the job's tree flattened) a layout and the tokens per step are read from.
LAYOUT_PARAMS = ("layout.dp", "layout.tp", "layout.pp")
TOKEN_PARAMS = ("batch.micro_batch_size", "batch.grad_accum_steps", "batch.seq_len", "layout.dp")


def layout_of_params(params: Mapping[str, str]) -> dict[str, int] | None:
    """{dp, tp, pp} from a run's params; None when it logged no layout (a refused config)."""
    if not all(str(params.get(k, "")).isdigit() for k in LAYOUT_PARAMS):
        return None
    return {k.split(".")[1]: int(params[k]) for k in LAYOUT_PARAMS}


def tokens_of_params(params: Mapping[str, str], counts_batch: bool = True) -> float | None:
    """micro_batch_size × grad_accum_steps × seq_len × dp from a run's params (what a training
    run's tokens_per_step metric holds); None when it logged no batch or layout, or its
    workload counts its own tokens (`counts_batch` False: workloads.counts_batch_tokens; e.g.
    inference counts its prompts and generated tokens: tokens_per_step_of)."""
    if not counts_batch:
        return None
    if not all(str(params.get(k, "")).isdigit() for k in TOKEN_PARAMS):
        return None
    tokens = 1
    for key in TOKEN_PARAMS:
        tokens *= int(params[key])
    return float(tokens)
