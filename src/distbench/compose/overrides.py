"""Command-line overrides that Hydra itself would refuse, found before Hydra runs, so that the
refusal is one line and exit 2 in a single run and in a sweep alike (Hydra prints several lines
and exits 1, and in a sweep aborts it): a `group=option` naming no option (a schema node such as
strategy=base_strategy, a typo), a value the typed config cannot hold (world_size=nan), and a
key its typed node does not have, added with `+` too (strategy=fsdp +strategy.offload_optimizer=
cpu: the torch engine's strategy schema has no offload), with any choice of a swept group.
Cheap on long command lines: a few composes for the whole line, not one per override.

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


def _combinations(
    choices: list[tuple[bool, str, list[str]]],
) -> list[tuple[list[str], list[str]]]:
    """The value sets to compose, each as (its overrides in order, the other values in it):
    every key at its first value; each other value of each key alone; and each other value of
    a group with each other value of another key (a group's option decides which keys exist
    and their types: strategy=dp,fsdp tries a strategy.* key on fsdp too). Two plain keys'
    values do not meet: a key's type is its node's. So the composes grow with the swept
    values, not with the number of overrides."""
    first = [f"{key}={values[0]}" for _, key, values in choices]
    others = [
        (i, is_group, f"{key}={v}")
        for i, (is_group, key, values) in enumerate(choices)
        for v in values[1:]
    ]
    sets: list[tuple[list[str], list[str]]] = [(first, [])]
    for i, _, other in others:
        sets.append(([*first[:i], other, *first[i + 1 :]], [other]))
    for a, (i, group_i, one) in enumerate(others):
        for j, group_j, two in others[a + 1 :]:
            if j != i and (group_i or group_j):
                both = list(first)
                both[i], both[j] = one, two
                sets.append((both, [one, two]))
    return sets


def _refusal(compose: Any, overrides: list[str]) -> str | None:
    """Hydra's refusal of composing `overrides` (one line), or a `+node.key` its typed node
    has no field for, else None."""
    try:
        cfg = compose(overrides)
    except Exception as exc:
        return _one_line(exc)
    for override in overrides:
        refusal = _added_outside_schema(cfg, override.split("=", 1)[0])
        if refusal:
            return refusal
    return None


def _at_fault(compose: Any, overrides: list[str], others: list[str]) -> str:
    """The refusal of a value set that does not compose, naming the override at fault: the
    shortest prefix that fails (bisected: log2(n) composes), with the other values before it."""
    good, bad = 0, len(overrides)  # composing nothing passes; all of them fails
    while bad - good > 1:
        mid = (good + bad) // 2
        if _refusal(compose, overrides[:mid]):
            bad = mid
        else:
            good = mid
    culprit = overrides[bad - 1]
    refusal = _refusal(compose, overrides[:bad]) or _refusal(compose, overrides)
    context = [o for o in others if o in overrides[: bad - 1]]
    note = f" (with {', '.join(context)})" if context else ""
    return f"{culprit}: {refusal}{note}"


def refuse_overrides(argv: list[str], conf_dir: Path | str) -> str | None:
    """One line naming an override on `argv` that Hydra would refuse, else None. One compose
    for the first values, one per other swept value (and per pair with a group's other option:
    _combinations), however many overrides there are; a refusal is bisected to its override."""
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
        # Hydra applies the group choices first, then the keys in order.
        choices.sort(key=lambda choice: not choice[0])
        for value_set, others in _combinations(choices):
            if _refusal(compose, value_set):
                return _at_fault(compose, value_set, others)
    return None
