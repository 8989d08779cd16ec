"""What `distbench plan` says under its tables besides the figures: the `python run.py ...`
command that runs a row, the refused layouts of a search counted by reason, and whether the
rows compare at one global batch (figures/fair.py). Pure (tools/plan/render.py prints them).

    python -c "from distbench.tools.plan.advice import reason_kind; \\
print(reason_kind('tp(16) does not divide model.num_kv_heads(8)'))"
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from distbench.figures.fair import tokens_differ, tokens_text
from distbench.figures.metrics import GIB

if TYPE_CHECKING:
    from distbench.figures.predict import Prediction

# The keys a row's command sets itself; the user's overrides of them are dropped.
ROW_KEYS = (
    "strategy",
    "strategy.dp",
    "strategy.tp",
    "strategy.pp",
    "zero_stage",
    "batch.micro_batch_size",
    "activation_checkpointing",
)
DOES_NOT_FIT = "does not fit: "  # search.py's memory refusal: "does not fit: 81.2 of 79.6 GiB..."


def run_command(overrides: Sequence[str], p: Prediction, label: str | None = None) -> str:
    """`python run.py ...` that runs a predicted row: the user's overrides (less those the row
    sets), then its strategy and, for a search's layout (`label`: search.layouts' `deepspeed
    dp4 tp2 pp1 z1 ckpt=full mb2`), its degrees and what the label sets (label_overrides)."""
    row_keys = ROW_KEYS if label else ("strategy",)
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in row_keys]
    row = [f"strategy={p.strategy}"]
    if label:
        row += [f"strategy.tp={p.layout.tp}"] if p.layout.tp != 1 else []
        row += [f"strategy.pp={p.layout.pp}"] if p.layout.pp != 1 else []
        row += label_overrides(label)
    return " ".join(["python", "run.py", *(shlex.quote(o) for o in [*kept, *row])])


def label_overrides(label: str) -> list[str]:
    """What a search label sets besides the degrees: `z1` → zero_stage=1, `ckpt=full` →
    activation_checkpointing=full, `mb2` → batch.micro_batch_size=2."""
    out = []
    for part in label.split()[1:]:
        if re.fullmatch(r"z\d", part):
            out.append(f"zero_stage={part[1:]}")
        elif part.startswith("ckpt="):
            out.append(f"activation_checkpointing={part.removeprefix('ckpt=')}")
        elif re.fullmatch(r"mb\d+", part):
            out.append(f"batch.micro_batch_size={part[2:]}")
    return out


def reason_kind(reason: str) -> str:
    """A refusal's kind: its text with each number as #, so that one rule refusing several
    degrees counts once."""
    if reason.startswith(DOES_NOT_FIT):
        return "does not fit in device memory"
    return re.sub(r"\d+(\.\d+)?", "#", reason)


def refusal_counts(refused: dict[str, str]) -> list[tuple[int, str]]:
    """(how many, an example reason) per kind of refusal, the most frequent first; memory
    refusals say the range of GiB needed against the device's."""
    kinds: dict[str, list[str]] = {}
    for reason in refused.values():
        kinds.setdefault(reason_kind(reason), []).append(reason)
    out = []
    for kind, reasons in kinds.items():
        if kind.startswith("does not fit"):
            needed = [float(r.split()[3]) for r in reasons]
            device = reasons[0].split()[5]
            kind = f"{kind} (needs {min(needed):,.1f}-{max(needed):,.1f} of {device} GiB)"
            out.append((len(reasons), kind))
        else:
            out.append((len(reasons), reasons[0] + (" (and alike)" if len(reasons) > 1 else "")))
    return sorted(out, key=lambda item: -item[0])


def memory_cells(p: Prediction) -> tuple[str, str]:
    """(needed / device GiB, free GiB) of a row: what the fit compares (the predicted peak
    plus what CUDA keeps; `fits`) against the device's memory, and the margin, red below 0."""
    needed = p.mem_needed_bytes / GIB
    if p.device_mem_bytes is None:
        return f"{needed:,.1f} / ?", "?"
    device = p.device_mem_bytes / GIB
    free = device - needed
    colour = "green" if free >= 0 else "red"
    return f"{needed:,.1f} / {device:,.1f}", f"[{colour}]{free:,.1f}[/{colour}]"


def tokens_note(predictions: Sequence[Prediction], ranked: bool = False) -> str | None:
    """A line when the rows differ in tokens per step: their tokens/s compare at different
    global batches; batch.global_batch_tokens plans them at one."""
    tokens = [float(p.num_tokens_per_step) for p in predictions]
    if not tokens_differ(tokens):
        return None
    how = "ranked by" if ranked else "the recommendation compares"
    return (
        f"rows differ in tokens per step ({tokens_text(min(tokens))} to "
        f"{tokens_text(max(tokens))}): {how} tokens/s at different global batches; "
        f"batch.global_batch_tokens={max(tokens):.0f} plans every row at one"
    )
