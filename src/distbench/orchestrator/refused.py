"""Resolving a job, and the stand-in for a config that does not resolve: a `Refused` job, with
the same tags, tree and settings the orchestrator reads from a `Job` (describe, tree(), tracking,
resume, spec), so nothing after resolve takes the composed config. A refusal is recorded as a
FAILED run (failure_kind=invalid_config) with its one-line reason, never raised.

    python -c "from tests.conftest import compose_config, CONF_DIR; \\
from distbench.orchestrator.refused import resolve_or_refuse; \\
print(resolve_or_refuse(compose_config(['world_size=3', 'strategy=tp']), CONF_DIR))"
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from distbench.compose.schema import ConfigError, TrackingConfig
from distbench.job import RAW_ENGINE, Job, resolve_job
from distbench.workloads import WorkloadSpec, registry

# What a tag shows when the refused config cannot tell it.
UNKNOWN = "invalid"


@dataclass(frozen=True)
class Refused:
    """A config that did not resolve: why, the tags it asked for (`invalid` where they cannot be
    told), what was composed (unresolved: the run's params and signature) and where its run is
    recorded."""

    reason: str
    names: dict[str, str]
    composed: dict[str, Any]
    tracking: TrackingConfig
    resume: bool = False
    retry_failed: bool = False
    workload_name: str = UNKNOWN

    def tree(self) -> dict[str, Any]:
        """What was composed, as asked (a Job's tree() is what resolved)."""
        return self.composed

    @property
    def spec(self) -> WorkloadSpec | None:
        """The asked workload's spec, None when no workload of that name is registered."""
        return registry().get(self.workload_name)

    @property
    def batch(self) -> None:  # nothing resolved: no micro batch to record
        return None

    @property
    def world_size_requested(self) -> None:
        return None


def resolve(cfg: DictConfig, conf_dir: Path) -> tuple[Job | None, str | None]:
    """(the Job, None), or (None, why the config cannot run). Pure (job.resolve_job): what is
    measured on this machine is attached by prepare.prepare_job before launch."""
    try:
        return resolve_job(cfg, conf_dir), None
    except ConfigError as exc:
        return None, str(exc)
    except OmegaConfBaseException as exc:  # a schema node chosen, an unresolvable ${...}
        return None, config_error_line(exc)


def resolve_or_refuse(cfg: DictConfig, conf_dir: Path) -> Job | Refused:
    """The Job, or the Refused stand-in with the reason (the spine's first step)."""
    job, refusal = resolve(cfg, conf_dir)
    return job if job is not None else refused_job(cfg, refusal or "the config did not resolve")


def config_error_line(exc: OmegaConfBaseException) -> str:
    """One line for an error OmegaConf raised while the config was read: its message's first
    line and the key it names."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    key = getattr(exc, "full_key", None)
    if key and key not in message:
        message = f"{key}: {message}"
    if "Missing mandatory value" in message:
        message += " (a required value is unset: give it on the command line)"
    return message


def refused_job(cfg: DictConfig, reason: str) -> Refused:
    """The Refused stand-in of a composed config, read as far as it can be: never raises for a
    missing or unresolvable value (it names nothing: `invalid`)."""
    workload = _value(cfg, "workload.name")
    spec = registry().get(workload)
    raw = spec is not None and not spec.builds_model
    names = {
        "strategy": workload if raw else _value(cfg, "strategy.name"),
        "engine": RAW_ENGINE if raw else _value(cfg, "strategy.engine"),
        "world_size": _value(cfg, "world_size"),
        "zero_stage": "none" if raw else UNKNOWN,
        "model": "none" if raw else _value(cfg, "model.name"),
        "batch": "none" if raw else _value(cfg, "batch.name"),
        "workload": workload,
        "dtype": _value(cfg, "workload.dtype"),
        "hardware": _value(cfg, "hardware.name"),
        "num_nodes": _value(cfg, "num_nodes"),
        "ranks_per_node": UNKNOWN,
    }
    return Refused(
        reason=reason,
        names=names,
        composed=OmegaConf.to_container(cfg, resolve=False),
        tracking=_tracking(cfg),
        resume=_flag(cfg, "resume"),
        retry_failed=_flag(cfg, "retry_failed"),
        workload_name=workload,
    )


def _value(cfg: DictConfig, path: str) -> str:
    with contextlib.suppress(Exception):  # a missing or unresolvable value names nothing
        found = OmegaConf.select(cfg, path, throw_on_missing=True)
        if found is not None:
            return str(found)
    return UNKNOWN


def _flag(cfg: DictConfig, key: str) -> bool:
    with contextlib.suppress(Exception):
        return bool(OmegaConf.select(cfg, key, throw_on_missing=True))
    return False


def _tracking(cfg: DictConfig) -> TrackingConfig:
    """Where the refusal is recorded: the config's tracking node, or the defaults (the sweep's
    store, from the environment) when that node cannot be read."""
    with contextlib.suppress(Exception):
        node = OmegaConf.merge(OmegaConf.structured(TrackingConfig), cfg.tracking)
        return OmegaConf.to_object(node)
    return TrackingConfig()
