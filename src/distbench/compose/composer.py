"""Compose conf/ outside run.py's `@hydra.main`: the one place the commands that compose a
config (`distbench plan`, `distbench resolve`, run.py's override check) initialise Hydra.

`project_dir()` finds the checkout holding conf/; `composing()` initialises Hydra on its conf/
(registering the schemas) and yields a `Composer` that turns overrides into the config run.py
would compose, its `hydra` node dropped.

    python -c "from distbench.compose.composer import composing
    with composing() as compose: print(compose(['strategy=zero3']).zero_stage)"
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omegaconf import DictConfig


def project_dir() -> Path:
    """The directory holding conf/: $DISTBENCH_HOME, else the parent of src/ (this package's
    checkout), else the working directory."""
    candidates = [Path(os.environ["DISTBENCH_HOME"])] if os.environ.get("DISTBENCH_HOME") else []
    candidates += [Path(__file__).resolve().parents[3], Path.cwd()]
    for candidate in candidates:
        if (candidate / "conf" / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        f"no conf/config.yaml under {', '.join(map(str, candidates))}; set DISTBENCH_HOME"
    )


@dataclass(frozen=True)
class Composer:
    """Composes `config` with overrides on the conf/ that Hydra was initialised on."""

    conf_dir: Path

    def __call__(self, overrides: list[str]) -> DictConfig:
        from hydra import compose
        from omegaconf import open_dict

        cfg = compose(config_name="config", overrides=list(overrides))
        with open_dict(cfg):
            cfg.pop("hydra", None)
        return cfg


@contextmanager
def composing(conf_dir: Path | str | None = None) -> Iterator[Composer]:
    """Hydra initialised on `conf_dir`, the schemas registered. Without `conf_dir`: the
    project's conf/ (project_dir()), its checkout set as $DISTBENCH_HOME when that is unset
    (conf/config.yaml's searchpath, where experiments/ is found)."""
    from hydra import initialize_config_dir

    from distbench.compose.schema import register_configs

    if conf_dir is None:
        home = project_dir()
        os.environ.setdefault("DISTBENCH_HOME", str(home))
        conf_dir = home / "conf"
    conf_dir = Path(conf_dir).resolve()
    register_configs()
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        yield Composer(conf_dir)
