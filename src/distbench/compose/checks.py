"""The checks every job shares, as pure functions that raise `ConfigError` with one line naming
the bad value and what is allowed. Engines (engines/*.check; a strategy field of another
engine is refused by Hydra, by the engine's strategy schema) and workloads (workloads/<name>
check) add their own; distbench.job.resolve_job runs them all, in that order.

    python -c "import distbench.compose.checks as c; print(c.resolve_degrees(8, -1, 2, 2))"
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from distbench.compose.schema import (
    DTYPES,
    FAULT_KINDS,
    MODEL_FAMILIES,
    RANK_LAUNCHERS,
    TIME_SOURCES,
    TRACKING_BACKENDS,
    ConfigError,
)

if TYPE_CHECKING:
    from distbench.job import Topology


def one_of(what: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(f"{what}={value!r} is not allowed; choose one of {list(allowed)}")


def positive(what: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{what}={value} must be >= 1")


def resolve_degrees(world_size: int, dp: int, tp: int, pp: int) -> tuple[int, int, int]:
    """Fill dp=-1 with the rest of the ranks and check dp * tp * pp == world_size."""
    positive("world_size", world_size)
    positive("strategy.tp", tp)
    positive("strategy.pp", pp)
    if dp == -1:
        if world_size % (tp * pp):
            raise ConfigError(
                f"world_size({world_size}) is not divisible by tp({tp}) * pp({pp}); "
                f"use a world_size that is a multiple of {tp * pp}"
            )
        dp = world_size // (tp * pp)
    positive("strategy.dp", dp)
    if dp * tp * pp != world_size:
        raise ConfigError(f"dp({dp}) * tp({tp}) * pp({pp}) != world_size({world_size})")
    return dp, tp, pp


def common(cfg: DictConfig) -> None:
    """What every job checks: tracking backend, peak and link sources, step counts, limits.*
    (positive, finite times; a positive memory cap) and fault.* (a fault on an existing rank)."""
    one_of("tracking.backend", cfg.tracking.backend, TRACKING_BACKENDS)
    one_of("hardware.peak_source", cfg.hardware.peak_source, ("catalog", "measured"))
    one_of("hardware.link_source", cfg.hardware.link_source, ("catalog", "measured"))
    one_of("hardware.time_source", cfg.hardware.time_source, TIME_SOURCES)
    positive("world_size", cfg.world_size)
    positive("workload.num_steps", cfg.workload.num_steps)
    if cfg.workload.num_warmup_steps < 0:
        raise ConfigError(f"workload.num_warmup_steps={cfg.workload.num_warmup_steps} must be >= 0")
    limits, fault = cfg.limits, cfg.fault
    for what in ("timeout_s", "startup_timeout_s", "stall_timeout_s"):
        value = getattr(limits, what)
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"limits.{what}={value} must be a finite number > 0")
    cap = limits.max_mem_gib
    if cap is not None and (not math.isfinite(cap) or cap <= 0):
        raise ConfigError(f"limits.max_mem_gib={cap} must be > 0 (or null)")
    one_of("fault.kind", fault.kind, FAULT_KINDS)
    if fault.kind != "none" and not 0 <= fault.rank < cfg.world_size:
        raise ConfigError(f"fault.rank={fault.rank} is not a rank of world_size({cfg.world_size})")


def model_choices(model: DictConfig, workload: DictConfig) -> None:
    """Dtype, model family and learning rate: the choices of every workload that builds a model
    (strategy.engine is the engine registry's: distbench.engines.get_spec)."""
    one_of("workload.dtype", workload.dtype, DTYPES)
    one_of("model.family", model.family, MODEL_FAMILIES)
    if not math.isfinite(workload.lr) or workload.lr <= 0:
        raise ConfigError(f"workload.lr={workload.lr} must be a finite number > 0")


def model_shape(model: Any, tp: int, pp: int = 1) -> None:
    """The architecture splits as asked: whole heads per TP rank, whole layers per stage, and a
    pretrained_path that holds a readable config.json."""
    for what in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "vocab_size"):
        positive(f"model.{what}", getattr(model, what))
    if model.hidden_size % model.num_heads:
        raise ConfigError(
            f"model.hidden_size({model.hidden_size}) is not divisible by "
            f"model.num_heads({model.num_heads})"
        )
    if model.num_heads % model.num_kv_heads:
        raise ConfigError(
            f"model.num_heads({model.num_heads}) is not divisible by "
            f"model.num_kv_heads({model.num_kv_heads})"
        )
    for heads in ("num_heads", "num_kv_heads"):
        if getattr(model, heads) % tp:
            raise ConfigError(
                f"model.{heads}({getattr(model, heads)}) is not divisible by tp({tp}); "
                f"tensor parallelism splits whole heads"
            )
    if model.num_layers < pp:
        raise ConfigError(
            f"model.num_layers({model.num_layers}) < pp({pp}); every pipeline stage needs a layer"
        )
    if model.num_layers % pp:
        raise ConfigError(
            f"model.num_layers({model.num_layers}) is not divisible by pp({pp}); "
            f"stages would be unbalanced"
        )
    if model.pretrained_path is not None:
        pretrained_dir(model.pretrained_path)


def pretrained_dir(path: str) -> None:
    """A `save_pretrained` directory: it exists and its config.json is a JSON object (what the
    ranks would otherwise find only after they started)."""
    import json

    if not Path(path).is_dir():
        raise ConfigError(f"model.pretrained_path={path!r} is not a directory")
    config = Path(path) / "config.json"
    try:
        parsed = json.loads(config.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"model.pretrained_path={path!r} has no config.json; give a save_pretrained directory"
        ) from None
    except (OSError, ValueError, RecursionError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(
            f"model.pretrained_path={path!r}: config.json is not valid JSON ({why})"
        ) from None
    if not isinstance(parsed, dict):
        raise ConfigError(
            f"model.pretrained_path={path!r}: config.json holds a {type(parsed).__name__}, "
            "not a JSON object"
        )


def no_fp16_on_cpu(device: str, dtype: str) -> None:
    if device == "cpu" and dtype == "fp16":
        raise ConfigError("workload.dtype='fp16' does not run on CPU; use fp32 or bf16")


def resolve_num_nodes(cfg: DictConfig) -> int:
    """num_nodes, or when unset the fewest nodes whose devices hold world_size ranks."""
    if cfg.num_nodes is not None:
        return cfg.num_nodes
    devices = cfg.hardware.get("devices_per_node")
    return -(-cfg.world_size // devices) if devices else 1


def tp_spans_nodes(tp: int, per_node: int) -> bool:
    """Ranks are laid out tp fastest, so a TP group is `tp` consecutive ranks: it stays inside a
    node exactly when tp divides the ranks per node."""
    return tp > 1 and per_node % tp != 0


def topology(cfg: DictConfig, tp: int = 1) -> Topology:
    """Nodes × ranks per node: num_nodes divides world_size, a node holds no more ranks than the
    hardware has devices, and TP stays inside a node (its all-reduces run every layer: across
    nodes they leave NVLink) unless tp_across_nodes=true. Returns the job's Topology."""
    from distbench.job import Topology

    ws, num_nodes = cfg.world_size, resolve_num_nodes(cfg)
    positive("num_nodes", num_nodes)
    one_of("rank_launcher", cfg.rank_launcher, RANK_LAUNCHERS)
    if ws % num_nodes:
        raise ConfigError(
            f"world_size({ws}) is not divisible by num_nodes({num_nodes}); "
            "world_size = num_nodes × ranks per node"
        )
    per_node = ws // num_nodes
    devices = cfg.hardware.get("devices_per_node")
    if devices and per_node > devices:
        raise ConfigError(
            f"{per_node} ranks per node (world_size({ws}) / num_nodes({num_nodes})) > "
            f"hardware.devices_per_node({devices}) of {cfg.hardware.name}; "
            f"use num_nodes={-(-ws // devices)} or more"
        )
    if tp_spans_nodes(tp, per_node) and not cfg.tp_across_nodes:
        raise ConfigError(
            f"tp({tp}) does not divide the {per_node} ranks of a node: TP groups would span "
            "nodes; set tp_across_nodes=true to run it anyway"
        )
    return Topology(
        num_nodes=num_nodes,
        ranks_per_node=per_node,
        rank_launcher=cfg.rank_launcher,
        tp_across_nodes=bool(cfg.tp_across_nodes),
    )
