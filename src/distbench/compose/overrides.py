"""Command-line overrides that Hydra itself would refuse, found before Hydra runs, so that the
refusal is one line and exit 2 in a single run and in a sweep alike (Hydra prints several lines
and exits 1, and in a sweep aborts it): a `group=option` naming no option (a schema node such as
strategy=base_strategy, a typo), a value the typed config cannot hold (world_size=nan), and a
key its typed node does not have, added with `+` too (strategy=fsdp +strategy.offload_optimizer=
cpu: the torch engine's strategy schema has no offload), with any choice of a swept group.

    python -c "from distbench.compose.overrides import refuse_overrides as r; \\
               print(r(['-m', 'world_size=2,nan'], 'conf'))"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

HIDDEN_GROUPS = frozenset({"hydra", "schema"})  # never a user's choice


def _parse(argv: list[str]) -> list[Any] | None:
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        args, _ = get_args_parser().parse_known_args(argv)
        return OverridesParser.create().parse_overrides(args.overrides)
    except Exception:  # a malformed command line: Hydra's own message says what is wrong
        return None


def _values(override: Any) -> list[str] | None:
    """The override's values as override text (each choice of a sweep), None for what only
    Hydra's own rules expand (glob(), range(), interval())."""
    from hydra.core.override_parser.types import ChoiceSweep, Sweep

    value = override.value()
    if isinstance(value, ChoiceSweep):
        return list(override.sweep_string_iterator())
    if isinstance(value, Sweep):
        return None
    return [override.get_value_element_as_str()]


def _one_line(exc: BaseException) -> str:
    """The first line of the innermost cause ("Value 'nan' ... could not be converted to
    Integer"), not Hydra's wrapper ("Error merging override world_size=nan")."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def _added_outside_schema(cfg: Any, key: str) -> str | None:
    """Hydra adds `+node.key=value` even under a typed node (it lifts the struct flag for it):
    the refusal the node's schema would have made ("Key 'x' not in 'TorchStrategyConfig'"), or
    None. Root keys (`+tracking_note=...`) are the job's extra keys: left alone."""
    import dataclasses

    from omegaconf import DictConfig, OmegaConf

    path = key.lstrip("+")
    if not key.startswith("+") or "." not in path:
        return None
    parent, leaf = path.rsplit(".", 1)
    node = OmegaConf.select(cfg, parent, default=None)
    kind = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
    if kind is None or not dataclasses.is_dataclass(kind):
        return None
    if leaf in {f.name for f in dataclasses.fields(kind)}:
        return None
    return f"Key '{leaf}' not in '{kind.__name__}'"


def _each_context(before: list[tuple[str, list[str]]]) -> list[tuple[list[str], str]]:
    """The overrides before one, at their first values, then with each other value of each in
    turn (a sweep's other choices: strategy=dp,fsdp tries a strategy.* key on fsdp too), each
    with what a refusal adds to say so ("" for the first values)."""
    first = [f"{key}={values[0]}" for key, values in before]
    contexts: list[tuple[list[str], str]] = [(first, "")]
    for i, (key, values) in enumerate(before):
        for value in values[1:]:
            contexts.append(
                ([*first[:i], f"{key}={value}", *first[i + 1 :]], f" (with {key}={value})")
            )
    return contexts


def refuse_overrides(argv: list[str], conf_dir: Path | str) -> str | None:
    """One line naming the first override on `argv` that Hydra would refuse, else None."""
    from hydra.core.global_hydra import GlobalHydra

    from distbench.compose.composer import composing

    overrides = _parse(argv)
    if not overrides:
        return None
    with composing(conf_dir) as compose:
        loader = GlobalHydra.instance().config_loader()
        groups = set(loader.list_groups("")) - HIDDEN_GROUPS
        choices: list[tuple[bool, str, list[str]]] = []  # (a group?, key, its values)
        for override in overrides:
            if override.key_or_group.startswith("hydra") or override.is_delete():
                continue
            values = _values(override)
            if values is None:
                continue
            if override.key_or_group in groups and not override.is_add():
                options = loader.get_group_options(override.key_or_group)
                for name in values:
                    if name not in options and name != "null":
                        return (
                            f"{override.key_or_group}={name} is not an option; choose one of "
                            f"{', '.join(sorted(options))}"
                        )
            is_group = override.key_or_group in groups
            choices.append((is_group, override.get_key_element(), values))
        # Hydra applies the group choices first, then the keys in order: add them one by one,
        # each value of each tried on what comes before it (_each_context), so the refusal
        # names the override at fault.
        choices.sort(key=lambda choice: not choice[0])
        before: list[tuple[str, list[str]]] = []
        for _, key, values in choices:
            for value in values:
                for context, note in _each_context(before):
                    try:
                        refusal = _added_outside_schema(compose([*context, f"{key}={value}"]), key)
                    except Exception as exc:
                        refusal = _one_line(exc)
                    if refusal:
                        return f"{key}={value}: {refusal}{note}"
            before.append((key, values))
    return None
