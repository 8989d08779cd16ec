"""What the user sees while a job runs: which job of how many, and one line per step.

Rank 0 appends a JSON line per step to the job's progress.jsonl; the orchestrator polls it. In a
terminal that drives a rich progress bar; in a log (CI, SLURM) it prints a timestamped
"starting ranks" line, then one line per step, torchtitan's step line with distbench's names:

    python run.py     # job strategy=dp world_size=2 ...
                      #  timed step 5/13  0.312 s  loss 10.3742  tok/s 3,274 (1,637/dev)
                      #    TFLOP/s/dev 0.0123  MFU 31.20%  mem 0.73 GiB (0.9%)

Every line also goes to the logging handlers that write files (Hydra's job log `run.log` in the
job dir), never to a console handler: the line is on stdout already.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from distbench.tracking.live import ProgressTail

LOGGER = logging.getLogger("distbench.job")
KIB = 1024


def format_duration(seconds: float) -> str:
    """A duration in the unit that reads best: 1.234 s, 12.35 ms, 45.67 us."""
    if seconds >= 1.0:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.2f} us"


def format_bytes(num_bytes: float) -> str:
    """A message size in binary units: 512 B, 64 KiB, 1.5 MiB, 2 GiB."""
    value, unit = float(num_bytes), "B"
    for next_unit in ("KiB", "MiB", "GiB", "TiB"):
        if value < KIB:
            break
        value, unit = value / KIB, next_unit
    return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"


def format_step_fields(line: dict[str, Any]) -> str:
    """A progress line's figures, torchtitan-style, each only where the line has it: size,
    time, loss, tokens/s (total and per device), TFLOP/s per device, MFU, peak memory (GiB and
    % of the device), bus bandwidth."""
    parts = []
    if "size_bytes" in line:
        parts.append(format_bytes(line["size_bytes"]))
    if isinstance(line.get("step_time_s"), int | float):
        parts.append(format_duration(line["step_time_s"]))
    if line.get("loss") is not None:
        parts.append(f"loss {line['loss']:.4f}")
    if "throughput_tokens_per_s" in line:
        tps = f"tok/s {line['throughput_tokens_per_s']:,.0f}"
        if "throughput_tokens_per_s_per_device" in line:
            tps += f" ({line['throughput_tokens_per_s_per_device']:,.0f}/dev)"
        parts.append(tps)
    if "tflops_per_device" in line:
        parts.append(f"TFLOP/s/dev {line['tflops_per_device']:.4g}")
    if "mfu_pct" in line:
        parts.append(f"MFU {line['mfu_pct']:.2f}%")
    if "peak_mem_gib" in line:
        mem = f"mem {line['peak_mem_gib']:.2f} GiB"
        if "peak_mem_pct" in line:
            mem += f" ({line['peak_mem_pct']:.1f}%)"
        parts.append(mem)
    if "busbw_gbps" in line:
        parts.append(f"busbw {line['busbw_gbps']:.4g} GB/s")
    return "  ".join(parts)


def format_step_line(line: dict[str, Any]) -> str:
    """One printed step line: the phase, the step of how many, then its figures."""
    return (
        f"  {line['phase']:>6} step {line['step']}/{line['num_steps']}  {format_step_fields(line)}"
    )


def starting_line(now: datetime.datetime) -> str:
    """What a log shows while the ranks start (20-45 s on CPU): the wall-clock time."""
    return f"  starting ranks at {now.isoformat(sep=' ', timespec='seconds')}"


def file_handlers(logger: logging.Logger) -> list[logging.Handler]:
    """The handlers writing files that a record of `logger` reaches (its own, then its
    ancestors' while it propagates): Hydra's job log is a FileHandler on the root logger."""
    found: list[logging.Handler] = []
    current: logging.Logger | None = logger
    while current is not None:
        found += [h for h in current.handlers if isinstance(h, logging.FileHandler)]
        if not current.propagate:
            break
        current = current.parent
    return found


def log_to_files(text: str, logger: logging.Logger = LOGGER) -> int:
    """Hand `text` (INFO) to the file handlers of `logger` only, not to the console ones: the
    line is printed already. Returns how many handlers took it."""
    if not logger.isEnabledFor(logging.INFO):
        return 0
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 0, text, None, None)
    taken = 0
    for handler in file_handlers(logger):
        if record.levelno >= handler.level:
            _handle_quietly(handler, record)
            taken += 1
    return taken


def _handle_quietly(handler: logging.Handler, record: logging.LogRecord) -> None:
    """A log file that cannot take the line (a full disk, a read-only job dir) drops it without
    logging's "--- Logging error ---" traceback: the line is on stdout already."""
    raise_exceptions, logging.raiseExceptions = logging.raiseExceptions, False
    try:
        handler.handle(record)
    finally:
        logging.raiseExceptions = raise_exceptions


class OwnLinesToLog(io.TextIOBase):
    """A stdout that also hands the orchestrator's own complete lines (those starting with
    `prefix`, e.g. "distbench: job 1 failed (...)") to the job log's file handlers, so run.log
    holds what the terminal showed; step lines are logged where they are made (JobProgress)."""

    def __init__(self, stream: TextIO, prefix: str = "distbench:") -> None:
        self.stream, self.prefix, self.pending = stream, prefix, ""

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            if line.lstrip().startswith(self.prefix):
                log_to_files(line.rstrip())
        return written

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.stream.encoding


@contextlib.contextmanager
def own_lines_to_log() -> Iterator[None]:
    """While the job runs, sys.stdout is an OwnLinesToLog around the real one."""
    real = sys.stdout
    sys.stdout = OwnLinesToLog(real)
    try:
        yield
    finally:
        sys.stdout = real


class JobProgress:
    """Context manager: call update() while the workers run."""

    def __init__(self, title: str, total_steps: int, progress_file: Path) -> None:
        self.title, self.total_steps = title, total_steps
        self.progress = ProgressTail(progress_file)
        self.console = Console()
        self.bar: Progress | None = None

    def __enter__(self) -> JobProgress:
        self.console.print(f"[bold]{self.title}[/bold]", highlight=False)
        log_to_files(self.title)
        starting = starting_line(datetime.datetime.now().astimezone())
        log_to_files(starting)
        if self.console.is_terminal:
            self.bar = Progress(
                TextColumn("  {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[last]}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=False,
            )
            self.task = self.bar.add_task("starting ranks", total=self.total_steps, last="")
            self.bar.start()
        else:  # a log: say when the ranks were started, the first step line comes much later
            print(starting, flush=True)
        return self

    def update(self) -> None:
        for line in self.progress.new_lines():
            text = format_step_line(line)
            log_to_files(text)
            if self.bar is not None:
                self.bar.update(
                    self.task,
                    completed=line["step"],
                    total=line["num_steps"],
                    description=line["phase"],
                    last=format_step_fields(line),
                )
            else:
                print(text, flush=True)

    def __exit__(self, *exc: object) -> None:
        self.update()
        if self.bar is not None:
            self.bar.stop()
