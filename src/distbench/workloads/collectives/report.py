"""The collectives table as artifacts: a CSV (one row per collective and message size), a PNG
of bus bandwidth against size (log axis) and nccl-tests' text table (printed at the end of the
run, as nccl-tests prints it), from plain rows. No torch.

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
    "num_wrong",
)


# nccl-tests' names (src/common.cu test_typenames, test_opnames) and its column layout.
NCCL_TYPE_NAMES = {"fp32": "float", "bf16": "bfloat16", "fp16": "half"}
REDUCING = ("all_reduce", "reduce_scatter")
ROOTED = ("broadcast",)
NCCL_HEADER = "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6} {:>6}".format(
    "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"
)
NCCL_UNITS = "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}".format(
    "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""
)


def nccl_time_us(time_s: float) -> str:
    """A time as nccl-tests prints it: microseconds, 7 wide, 2 decimals below 100 us, 1 below
    10 ms, none above."""
    us = time_s * 1e6
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def nccl_row(row: dict[str, Any]) -> str:
    """One line of nccl-tests' table: size, count, type, redop, root, time, algbw, busbw,
    #wrong (row: a table_rows() dict with `nccl_count`)."""
    op = row["collective"]
    redop = "sum" if op in REDUCING else "none"
    root = 0 if op in ROOTED else -1
    type_name = NCCL_TYPE_NAMES.get(row["dtype"], row["dtype"])
    return (
        f"{row['size_bytes']:12d}  {row['nccl_count']:12d}  {type_name:>8}  {redop:>6}  "
        f"{root:6d}  {nccl_time_us(row['time_s_p50'])}  {row['algbw_gbps']:6.2f}  "
        f"{row['busbw_gbps']:6.2f}  {row['num_wrong']:5d}"
    )


def nccl_table(rows: list[dict[str, Any]], backend: str) -> str:
    """nccl-tests' output for each collective of rows: its header, one line per size, the out
    of bounds values and the average bus bandwidth (busbw_avg_gbps). The time is the p50 of
    the timed calls, each the slowest rank's (nccl-tests: the mean); algbw and busbw use it."""
    from distbench.workloads.collectives.metrics import busbw_avg_gbps

    out = []
    for op in dict.fromkeys(r["collective"] for r in rows):
        mine = [r for r in rows if r["collective"] == op]
        first = mine[0]
        wrong = sum(r["num_wrong"] for r in mine)
        out += [
            f"# Collective test: {op}  ({first['world_size']} ranks, {backend}, "
            f"{first['implementation']}; time: p50 of the timed calls)",
            "#",
            NCCL_HEADER,
            NCCL_UNITS,
            *(nccl_row(r) for r in mine),
            f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
            f"# Avg bus bandwidth    : {busbw_avg_gbps([r['busbw_gbps'] for r in mine]):g} ",
            "#",
        ]
    return "\n".join(out) + "\n"


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
