"""The collectives table as artifacts: a CSV (one row per collective and message size) and a
PNG of bus bandwidth against size (log axis), from plain rows. No torch.

    python -c "from distbench.workloads.collectives.report import CSV_COLUMNS; print(CSV_COLUMNS)"
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

CSV_COLUMNS = (
    "collective",
    "world_size",
    "dtype",
    "size_bytes",
    "count",
    "time_s_p50",
    "time_s_p90",
    "algbw_gbps",
    "busbw_gbps",
    "bus_factor",
    "implementation",
    "check_max_rel_err",
)


def write_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    """rows (dicts with CSV_COLUMNS keys) → path."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows({k: row[k] for k in CSV_COLUMNS} for row in rows)
    return path


def plot_busbw(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """One line per collective: busbw_gbps against size_bytes, log2 x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for op in dict.fromkeys(r["collective"] for r in rows):
        mine = [r for r in rows if r["collective"] == op]
        label = op if mine[0]["implementation"] == "native" else f"{op} (emulated)"
        ax.plot([r["size_bytes"] for r in mine], [r["busbw_gbps"] for r in mine], "o-", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s, 1e9 B/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
