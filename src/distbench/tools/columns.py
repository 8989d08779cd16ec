"""Terminal tables that fit the terminal: each column has a priority and the lowest go first until
the table fits the width (headers wrap onto a second line, cells never wrap); with two rows or
more, a column whose every cell says the same moves to one caption line; a sweep's varied keys
(the override values that differ between its jobs) become columns with short headers. Used by
the end-of-sweep table (tools/summary.py) and `distbench plan` (tools/plan/render.py).

    python -c "from distbench.tools.columns import *; print(short_headers(['batch.seq_len']))"
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A column that is never dropped to fit the width.
KEEP = 9
# The width of output that is not a terminal (a log, a pipe) unless $COLUMNS says: the target
# every table fits.
LOG_WIDTH = 100
# Short headers of keys users sweep; any other key shows its last dotted part.
SHORT_HEADERS = {
    "micro_batch_size": "micro batch",
    "grad_accum_steps": "grad accum",
    "global_batch_tokens": "global batch",
    "seq_len": "seq len",
    "num_steps": "steps",
    "num_warmup_steps": "warm-up",
}


@dataclass
class Col:
    """One column: its header, its cells (rich markup), how it aligns, and its priority (the
    lowest is dropped first when the table is too wide; KEEP never)."""

    header: str
    cells: list[str]
    justify: str = "right"
    priority: int = 1


def terminal_width() -> int:
    """The width tables fit: $COLUMNS, else the terminal's, else LOG_WIDTH (not a terminal)."""
    from rich.console import Console

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    console = Console()
    return console.width if console.is_terminal else LOG_WIDTH


def plain(markup: str) -> str:
    """A cell's text without its rich markup."""
    from rich.text import Text

    return Text.from_markup(markup).plain


def _cells_width(col: Col) -> int:
    from rich.cells import cell_len

    return max((cell_len(plain(c)) for c in col.cells), default=0)


def header_width(header: str, max_lines: int = 2) -> int:
    """The narrowest a header gets on at most `max_lines` lines (wrapped at spaces)."""
    from rich.cells import cell_len

    words = header.split() or [""]
    for width in range(max(cell_len(w) for w in words), cell_len(header) + 1):
        lines, used = 1, -1
        for word in words:
            if used + 1 + cell_len(word) > width:
                lines, used = lines + 1, cell_len(word)
            else:
                used += 1 + cell_len(word)
        if lines <= max_lines:
            return width
    return cell_len(header)


def min_width(col: Col) -> int:
    """The narrowest a column gets: its widest cell, or its header on two lines."""
    return max(_cells_width(col), header_width(col.header))


def full_width(col: Col) -> int:
    """Its width with the header on one line."""
    from rich.cells import cell_len

    return max(_cells_width(col), cell_len(col.header))


def table_width(widths: Sequence[int]) -> int:
    """The width of a boxed table of columns this wide: `│ cell │ cell │`."""
    return sum(w + 3 for w in widths) + 1


def fit_columns(cols: Sequence[Col], width: int) -> tuple[list[Col], list[Col]]:
    """(kept, dropped): the lowest-priority column (the rightmost of equals) is dropped until
    the table fits `width`, or only KEEP columns are left."""
    kept, dropped = list(cols), []
    while table_width([min_width(c) for c in kept]) > width:
        optional = [c for c in kept if c.priority < KEEP]
        if not optional:
            break
        lowest = min(c.priority for c in optional)
        victim = [c for c in optional if c.priority == lowest][-1]
        kept.remove(victim)
        dropped.append(victim)
    return kept, dropped


def column_widths(cols: Sequence[Col], width: int) -> list[int]:
    """Each column's width: its minimum, then, left to right, what the width spares up to its
    header on one line."""
    widths = [min_width(c) for c in cols]
    spare = width - table_width(widths)
    for i, col in enumerate(cols):
        extra = max(0, min(spare, full_width(col) - widths[i]))
        widths[i] += extra
        spare -= extra
    return widths


def split_constant(
    cols: Sequence[Col], movable: Collection[str]
) -> tuple[list[Col], list[tuple[str, str]]]:
    """(columns, [(header, value)]): with two rows or more, each `movable` column whose cells
    all say the same leaves the table for the caption."""
    kept, constant = [], []
    for col in cols:
        values = {plain(c) for c in col.cells}
        if col.header in movable and len(col.cells) > 1 and len(values) == 1:
            constant.append((col.header, values.pop()))
        else:
            kept.append(col)
    return kept, constant


def fitted_table(
    cols: Sequence[Col], width: int, title: str | None = None, notes: Sequence[str] = ()
) -> tuple[Any, list[str]]:
    """(rich Table, headers dropped to fit): the columns that fit `width`, each as wide as
    column_widths gives; `notes` and what was dropped in its caption."""
    from rich.table import Table
    from rich.text import Text

    kept, dropped = fit_columns(cols, width)
    lines = list(notes)
    if dropped:
        hidden = ", ".join(c.header for c in dropped)
        lines.append(f"hidden to fit {width} columns: {hidden}")
    table = Table(title=title, caption="\n".join(lines) or None, caption_justify="left")
    for col, w in zip(kept, column_widths(kept, width), strict=True):
        header = Text(col.header, justify=col.justify, no_wrap=False)  # a header may wrap
        table.add_column(header, justify=col.justify, no_wrap=True, width=w)
    for row in zip(*(c.cells for c in kept), strict=True):
        table.add_row(*row)
    return table, [c.header for c in dropped]


def varied_keys(per_job: Sequence[Mapping[str, str]], shown: Collection[str] = ()) -> list[str]:
    """The keys whose value differs between jobs (a key some job lacks differs too), in the
    order they first appear, less those another column already shows."""
    keys: list[str] = []
    for values in per_job:
        keys += [k for k in values if k not in keys and k not in shown]
    return [k for k in keys if len({values.get(k) for values in per_job}) > 1]


def short_headers(keys: Sequence[str]) -> dict[str, str]:
    """{key: header}: its last dotted part (SHORT_HEADERS' where it has one, else with spaces for
    underscores so that it wraps), or the whole key when two keys share their last part."""
    leaves = [k.rsplit(".", 1)[-1] for k in keys]
    return {
        key: (SHORT_HEADERS.get(leaf, leaf.replace("_", " ")) if leaves.count(leaf) == 1 else key)
        for key, leaf in zip(keys, leaves, strict=True)
    }


def parse_overrides(overrides: Sequence[str]) -> dict[str, str]:
    """{key: value} of `key=value` overrides as Hydra records them (`+`/`~` dropped)."""
    out = {}
    for override in overrides:
        key, sep, value = str(override).partition("=")
        if sep and not key.startswith("hydra."):
            out[key.lstrip("+~")] = value
    return out


def job_overrides(job_dir: str | Path | None) -> dict[str, str]:
    """A job's overrides (its .hydra/overrides.yaml, as Hydra wrote them), {} when absent."""
    import yaml

    path = Path(job_dir or "") / ".hydra" / "overrides.yaml"
    if not job_dir or not path.is_file():
        return {}
    try:
        listed = yaml.safe_load(path.read_text()) or []
    except (OSError, yaml.YAMLError):
        return {}
    return parse_overrides(listed if isinstance(listed, list) else [])
