"""Command-line overrides that Hydra itself would refuse, found before Hydra runs, so that the
refusal is one line and exit 2 in a single run and in a sweep alike (Hydra prints several lines
and exits 1, and in a sweep aborts it): a `group=option` naming no option (a schema node such as
strategy=base_strategy, a typo), and a value the typed config cannot hold (world_size=nan).

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


def refuse_overrides(argv: list[str], conf_dir: Path | str) -> str | None:
    """One line naming the first override on `argv` that Hydra would refuse, else None."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides = _parse(argv)
    if not overrides:
        return None
    with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
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
        # Hydra applies the group choices first, then the keys in order: add them one by one
        # (the first value of each), each value of each tried on what comes before it, so the
        # refusal names the override at fault.
        choices.sort(key=lambda choice: not choice[0])
        before: list[str] = []
        for _, key, values in choices:
            for value in values:
                try:
                    compose(config_name="config", overrides=[*before, f"{key}={value}"])
                except Exception as exc:
                    return f"{key}={value}: {_one_line(exc)}"
            before.append(f"{key}={values[0]}")
    return None
