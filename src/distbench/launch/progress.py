"""What the user sees while a job runs: which job of how many, and its step progress.

Rank 0 appends a JSON line per step to the job's progress.jsonl; the orchestrator polls it. In a
terminal that drives a rich progress bar; in a log (CI, SLURM) it prints one line per step.

    python run.py     # shows: job strategy=dp world_size=2 ... ━━━━━━ 7/13 steps
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class JobProgress:
    """Context manager: call update() while the workers run."""

    def __init__(self, title: str, total_steps: int, progress_file: Path) -> None:
        self.title, self.total_steps, self.progress_file = title, total_steps, progress_file
        self.console = Console()
        self.num_lines_seen = 0
        self.bar: Progress | None = None

    def __enter__(self) -> JobProgress:
        self.console.print(f"[bold]{self.title}[/bold]", highlight=False)
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
        return self

    def _new_lines(self) -> list[dict[str, Any]]:
        if not self.progress_file.exists():
            return []
        lines = self.progress_file.read_text().splitlines()
        complete = [ln for ln in lines if ln.endswith("}")]
        new = complete[self.num_lines_seen :]
        self.num_lines_seen = len(complete)
        return [json.loads(ln) for ln in new]

    def update(self) -> None:
        for line in self._new_lines():
            last = f"{line['step_time_s']:.3f} s"
            if line.get("loss"):
                last += f"  loss {line['loss']:.4f}"
            if self.bar is not None:
                self.bar.update(
                    self.task,
                    completed=line["step"],
                    total=line["num_steps"],
                    description=line["phase"],
                    last=last,
                )
            else:
                print(
                    f"  {line['phase']:>6} step {line['step']}/{line['num_steps']}  {last}",
                    flush=True,
                )

    def __exit__(self, *exc: object) -> None:
        self.update()
        if self.bar is not None:
            self.bar.stop()
