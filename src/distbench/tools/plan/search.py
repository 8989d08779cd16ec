"""`distbench plan --search`: the strategy files' degrees not taken as given. From DeepSpeed's
dp (ZeRO 0-3) and torch's ddp and fsdp it derives every (dp, tp, pp) of powers of two × micro
batch 1-8, resolves each as run.py would (refusals keep the engine's reason), predicts it, ranks
those that fit by tokens/s and lists the rest by reason (tools/plan/). Activation checkpointing
is a dimension too: each layout is tried without it, then selective, then full
(SEARCH_CHECKPOINTING), and keeps the first that fits (labelled `ckpt=full`), so checkpointing
costs its recompute only where memory needs it; an `activation_checkpointing=` override (or
--recompute: full) pins one mode. A torch TP layout without pp also tries each mode with
sequence parallel (labelled `sp`), after the mode without it (its few more gathers cost less
than a recompute); a `strategy.sequence_parallel=` override pins it.

    python -c "from distbench.tools.plan import search_layouts as s; \\
               print(s(['model=tiny', 'world_size=4']).ranked[0][0])"
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import open_dict

from distbench.compose.composer import composing
from distbench.compose.schema import ConfigError, HardwareConfig
from distbench.figures.metrics import GIB
from distbench.figures.pred_error import ErrorBar
from distbench.figures.predict import Prediction, predict
from distbench.prepare import left_unmeasured, prepare_job
from distbench.tools.plan.inputs import (
    composed_or_why,
    efficiency_model,
    plan_warnings,
    run_key_tags,
    split_strategy_override,
)
from distbench.tools.plan.store import strategy_error_bars

# The base strategy each engine's layouts are derived from (degrees, ZeRO stage and micro
# batch are then set on it): DeepSpeed's dp with zero_stage 0-3, torch's ddp and fsdp.
SEARCH_BASES = (
    ("deepspeed", "dp", (0, 1, 2, 3)),
    ("torch", "ddp", (None,)),
    ("torch", "fsdp", (None,)),
)
SEARCH_MICRO_BATCHES = (1, 2, 4, 8)
# Activation checkpointing modes in the order a layout tries them: the cheapest first.
SEARCH_CHECKPOINTING = ("none", "selective", "full")


@dataclass
class Search:
    """Every (engine, dp, tp, pp, ZeRO stage, micro batch) tried: those that fit, ranked by
    predicted tokens/s; the rest with their reason (the engine's refusal, or the memory)."""

    ranked: list[tuple[str, Prediction]]
    refused: dict[str, str]
    title: str
    warnings: list[str] = field(default_factory=list)
    # layout -> kind -> the error bar of the stored runs of its key (pred_error.KEY_TAGS: the
    # model, strategy file, ZeRO stage, hardware and precision, at whatever degrees they ran)
    error_bars: dict[str, dict[str, ErrorBar]] = field(default_factory=dict)
    history: str = ""  # where the error bars came from, or why there are none


@dataclass
class _Found:
    """The layouts tried so far, and what the first resolved one fixes for the search."""

    ranked: list[tuple[str, Prediction]] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    keys: dict[str, dict[str, str]] = field(default_factory=dict)  # layout -> its runs' tags
    time_sources: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    title: str = "distbench plan --search"
    tracking: Any = None
    hardware: HardwareConfig | None = None
    overrides: list[str] = field(default_factory=list)  # the search's (batch warnings)


def search_layouts(
    overrides: list[str],
    *,
    micro_batches: tuple[int, ...] = SEARCH_MICRO_BATCHES,
    efficiency: float | None = None,
    recompute: bool = False,
    history: bool = True,
    on_layout: Callable[[int, int], None] | None = None,
) -> Search:
    """`distbench plan --search`: derive every layout the engines allow from SEARCH_BASES at
    the overrides' world size, resolve each exactly as run.py would (refusals keep the
    engine's one-line reason), predict it, and rank those that fit by tokens/s. With
    `history`, each carries the error bar of its key's stored runs (strategy_error_bars).
    `on_layout(tried, total)` is called as each layout starts (a progress bar)."""
    overrides, _ = split_strategy_override(efficiency_model(overrides, efficiency))
    tried = 0
    found = _Found(overrides=overrides)
    modes = checkpointing_modes(overrides, recompute)
    with composing() as compose:
        for engine, base, stages in SEARCH_BASES:
            cfg, why = composed_or_why(compose, [*overrides, f"strategy={base}"])
            if why is not None:  # an override of another engine's key
                found.refused[f"{engine} {base}"] = why
                continue
            for label, candidate in layouts(cfg, engine, base, stages, micro_batches):
                tried += 1
                if on_layout is not None:
                    on_layout(tried, search_size(cfg.world_size, micro_batches))
                # the first that fits, else the last one's refusal
                for mode, sliced in memory_savers(candidate, modes, overrides):
                    refused = _try_layout(
                        found, label, candidate, mode, sliced, compose.conf_dir, efficiency
                    )
                    if refused is None:
                        break
                else:
                    found.refused[refused[0]] = refused[1]
    found.ranked.sort(key=lambda item: -(item[1].tokens_per_s or 0.0))
    bars, note = (
        strategy_error_bars(found.tracking, found.keys, found.time_sources) if history else ({}, "")
    )
    return Search(found.ranked, found.refused, found.title, found.warnings, bars, note)


def checkpointing_modes(overrides: list[str], recompute: bool) -> tuple[str | None, ...]:
    """The activation checkpointing modes each layout tries: SEARCH_CHECKPOINTING, or only the
    composed one when an override sets activation_checkpointing (None: as composed), or full
    with --recompute."""
    if recompute:
        return ("full",)
    pinned = any(o.lstrip("+~").startswith("activation_checkpointing=") for o in overrides)
    return (None,) if pinned else SEARCH_CHECKPOINTING


def memory_savers(
    candidate: Any, modes: tuple[str | None, ...], overrides: list[str]
) -> list[tuple[str | None, bool]]:
    """(checkpointing mode, sequence parallel) pairs a layout tries, the cheapest first: each
    mode without sequence parallel, then with it where it can run (the torch engine, tp > 1,
    no pp) and no override pins strategy.sequence_parallel."""
    strategy = candidate.strategy
    pinned = any(o.lstrip("+~").startswith("strategy.sequence_parallel=") for o in overrides)
    can_slice = strategy.engine == "torch" and strategy.tp > 1 and strategy.pp == 1
    slicing = (False, True) if can_slice and not pinned else (False,)
    return [(mode, sliced) for mode in modes for sliced in slicing]


def _try_layout(
    found: _Found,
    label: str,
    candidate: Any,
    mode: str | None,
    sliced: bool,
    conf_dir: Path,
    efficiency: float | None,
) -> tuple[str, str] | None:
    """Resolve and predict the layout with activation checkpointing `mode` (None: as
    composed) and, where `sliced`, sequence parallel: None when it fits and joins the
    ranking, else (its label, why not): the engine's refusal or its memory."""
    if mode is not None or sliced:
        candidate = candidate.copy()
        with open_dict(candidate):
            if mode is not None:
                candidate.activation_checkpointing = mode
            if sliced:
                candidate.strategy.sequence_parallel = True
    mode = candidate.get("activation_checkpointing", "none")
    head, _, mb = label.rpartition(" mb")
    head += " sp" if sliced else ""
    named = f"{head} mb{mb}" if mode == "none" else f"{head} ckpt={mode} mb{mb}"
    try:
        job = resolve_layout(candidate, conf_dir, efficiency, False)
    except ConfigError as exc:
        return label, str(exc)
    if found.hardware is None:
        _first_job(found, job, found.overrides)
    why = _rank(found, named, job, predict(job, efficiency=efficiency))
    return None if why is None else (named, why)


def search_size(world_size: int, micro_batches: tuple[int, ...]) -> int:
    """How many layouts search_layouts tries at this world size."""
    stages = sum(len(s) for _, _, s in SEARCH_BASES)
    return stages * len(degrees(world_size)) * len(micro_batches)


def degrees(world_size: int) -> list[tuple[int, int]]:
    """(tp, pp) pairs of powers of two whose product divides world_size."""
    powers = [2**i for i in range(world_size.bit_length()) if world_size % 2**i == 0]
    return [(tp, pp) for tp in powers for pp in powers if world_size % (tp * pp) == 0]


def layouts(
    cfg: Any, engine: str, base: str, stages: tuple[int | None, ...], micro_batches: tuple[int, ...]
) -> Iterator[tuple[str, Any]]:
    """(label, config) of each layout derived from the base strategy's composed config: its
    degrees, ZeRO stage and micro batch set, dp the rest of the world size."""
    for (tp, pp), stage, mb in (
        (d, z, m) for d in degrees(cfg.world_size) for z in stages for m in micro_batches
    ):
        dp = cfg.world_size // (tp * pp)
        label = f"{base if engine == 'torch' else 'deepspeed'} dp{dp} tp{tp} pp{pp}"
        label += f" z{stage} mb{mb}" if stage is not None else f" mb{mb}"
        candidate = cfg.copy()
        with open_dict(candidate):
            candidate.strategy.tp, candidate.strategy.pp = tp, pp
            candidate.strategy.dp = -1
            candidate.batch.micro_batch_size = mb
            if stage is not None:
                candidate.zero_stage = stage
        yield label, candidate


def resolve_layout(
    candidate: Any, conf_dir: Path, efficiency: float | None, recompute: bool
) -> Any:
    """The layout's Job (ConfigError for what run.py refuses): measured parts only for a
    layout that fits (the fit does not use them)."""
    from distbench.job import resolve_job

    job = prepare_job(resolve_job(candidate, conf_dir), probe=False)
    fits = predict(job, efficiency=efficiency, recompute=recompute).fits
    if fits is not False and left_unmeasured(job.measured):
        job = prepare_job(resolve_job(candidate, conf_dir))
    return job


def _first_job(found: _Found, job: Any, overrides: list[str]) -> None:
    """The search's hardware, store, warnings and title, from its first resolved layout."""
    found.hardware, found.tracking = job.hardware, job.tracking
    found.warnings = plan_warnings(job, overrides)
    found.title = (
        f"distbench plan --search: model={job.model.name} "
        f"world_size={job.world_size} hardware={job.hardware.name} "
        f"precision={job.precision} seq_len={job.batch.seq_len} "
        f"grad_accum={job.batch.grad_accum_steps}"
    )


def _rank(found: _Found, label: str, job: Any, p: Prediction) -> str | None:
    """A layout that fits joins the ranking (None); one that does not is not ranked: its
    memory, as its refusal."""
    if p.fits is False:
        return (
            f"does not fit: {p.mem_needed_bytes / GIB:.1f} of "
            f"{p.device_mem_bytes / GIB:.1f} GiB per device"
        )
    found.ranked.append((label, p))
    found.keys[label] = run_key_tags(job)
    found.time_sources[label] = job.hardware.time_source
    return None
