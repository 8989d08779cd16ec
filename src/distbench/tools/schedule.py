"""`distbench schedule`: a named study from experiments/ as a nightly sweep, optionally followed by
`distbench compare` against a baseline sweep (the job fails when a regression is flagged).

With `scrontab` (Slurm's crontab) on PATH it installs the entry into the user's scrontab, in a
block between two marker comments named after the schedule, so running it again replaces that
block and leaves every other line alone. Without scrontab, or with --dry-run, it prints the
crontab line and the one-shot `sbatch --begin=...` for the next occurrence instead.

    distbench schedule experiment=strategy_grid --cron "0 2 * * *" --dry-run
    distbench schedule experiment=zero_stages --cron "30 1 * * 1-5" world_size=4 \\
        --baseline 0123456789abcdef0123456789abcdef --slurm-option=--gres=gpu:4
    python -c "from distbench.tools.schedule import parse_cron; print(parse_cron('0 2 * * *'))"
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from distbench.tracking.secrets_mask import mask_text

FIELDS = (  # name, lowest, highest, names
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    (
        "month",
        1,
        12,
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    ),
    ("day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)
CRON_HELP = "5 fields: minute hour day-of-month month day-of-week, e.g. '0 2 * * *'"
SEARCH_DAYS = 366 * 8 + 2  # 29 February comes at least once in 8 years
NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
RUN_ID = re.compile(r"^[0-9a-f]{32}$")
MARKER = "# distbench schedule {name} {edge}"


@dataclass(frozen=True)
class Cron:
    """A parsed 5-field cron expression: the allowed values of each field."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday (7 folded into 0)
    days_restricted: bool
    weekdays_restricted: bool


def _value(text: str, field: int, expression: str) -> int:
    name, low, high, names = FIELDS[field]
    offset = 1 if name == "month" else 0
    value = names.index(text.lower()) + offset if text.lower() in names else None
    if value is None:
        if not text.isdigit():
            raise ValueError(
                f"cron {expression!r}: {name} {text!r} is not a number"
                + (f" or a name ({', '.join(names)})" if names else "")
            )
        value = int(text)
    if not low <= value <= high:
        raise ValueError(f"cron {expression!r}: {name} {value} is out of range {low}-{high}")
    return value


def _field(text: str, field: int, expression: str) -> frozenset[int]:
    name, low, high, _ = FIELDS[field]
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"cron {expression!r}: {name} step {step_text!r} is not >= 1")
            step = int(step_text)
        if base == "*":
            first, last = low, high
        elif "-" in base:
            first_text, _, last_text = base.partition("-")
            first = _value(first_text, field, expression)
            last = _value(last_text, field, expression)
            if first > last:
                raise ValueError(f"cron {expression!r}: {name} range {base!r} runs backwards")
        else:
            first = _value(base, field, expression)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
    if name == "day-of-week" and 7 in values:
        values = (values - {7}) | {0}
    return frozenset(values)


def parse_cron(expression: str) -> Cron:
    """Parse `minute hour day-of-month month day-of-week` (numbers, names, `*`, `a-b`, lists,
    `/step`). ValueError, one line naming the bad field, otherwise."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"cron {expression!r} has {len(fields)} field(s); need {CRON_HELP}")
    parsed = [_field(text, i, expression) for i, text in enumerate(fields)]
    return Cron(
        expression=" ".join(fields),
        minutes=parsed[0],
        hours=parsed[1],
        days=parsed[2],
        months=parsed[3],
        weekdays=parsed[4],
        days_restricted=not fields[2].startswith("*"),
        weekdays_restricted=not fields[4].startswith("*"),
    )


def _day_matches(cron: Cron, day: dt.date) -> bool:
    """cron's rule: when both day fields are restricted, either may match."""
    weekday = (day.weekday() + 1) % 7  # Python: Monday = 0; cron: Sunday = 0
    in_days, in_weekdays = day.day in cron.days, weekday in cron.weekdays
    if cron.days_restricted and cron.weekdays_restricted:
        return in_days or in_weekdays
    return in_days and in_weekdays


def next_occurrence(cron: Cron, after: dt.datetime) -> dt.datetime:
    """The first minute strictly after `after` that the expression matches."""
    start = after.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    for offset in range(SEARCH_DAYS):
        day = start.date() + dt.timedelta(days=offset)
        if day.month not in cron.months or not _day_matches(cron, day):
            continue
        for hour in sorted(cron.hours):
            for minute in sorted(cron.minutes):
                moment = dt.datetime.combine(day, dt.time(hour, minute), tzinfo=start.tzinfo)
                if moment >= start:
                    return moment
    raise ValueError(f"cron {cron.expression!r} never matches a real date (e.g. 31 February)")


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise ValueError(f"schedule name {name!r} may hold only letters, digits, '_', '.', '-'")
    return name


def split_overrides(args: Sequence[str]) -> tuple[str, list[str]]:
    """(experiment name, the other overrides) from `experiment=NAME` (or `experiments=NAME`)
    among the positional arguments."""
    names = [
        a.split("=", 1)[1] for a in args if a.split("=", 1)[0] in ("experiment", "experiments")
    ]
    rest = [a for a in args if a.split("=", 1)[0] not in ("experiment", "experiments")]
    if len(names) != 1 or not names[0]:
        raise ValueError(
            "name exactly one study as experiment=NAME (a file experiments/NAME.yaml), "
            f"got {len(names)}"
        )
    return names[0], rest


def check_experiment(project: Path, name: str) -> Path:
    path = project / "experiments" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (project / "experiments").glob("*.yaml"))
        raise ValueError(f"experiment={name}: no {path}; known: {', '.join(known) or 'none'}")
    return path


def job_command(
    project: Path,
    experiment: str,
    overrides: Sequence[str] = (),
    baseline: str | None = None,
    tracking_uri: str | None = None,
) -> str:
    """The shell command of one scheduled run: the sweep, then (with a baseline) the comparison
    of the newest sweep against it, whose exit status 1 fails the job on a regression."""
    if baseline is not None and not RUN_ID.match(baseline):
        raise ValueError(f"--baseline {baseline!r} is not an MLflow run id (32 hex digits)")
    if tracking_uri and mask_text(tracking_uri) != tracking_uri:
        raise ValueError(
            f"--tracking-uri {mask_text(tracking_uri)!r} has a password in it, which would be "
            "stored in the crontab; use a server that needs none, or MLflow's own env settings"
        )
    parts = []
    if tracking_uri:
        parts.append(f"export MLFLOW_TRACKING_URI={shlex.quote(tracking_uri)}")
    parts.append(f"cd {shlex.quote(str(project))}")
    sweep = [".venv/bin/python", "run.py", "-m", f"experiments={experiment}", *overrides]
    parts.append(" ".join(shlex.quote(a) for a in sweep))
    if baseline:
        parts.append(f".venv/bin/distbench compare --baseline {baseline} --candidate latest")
    command = " && ".join(parts)
    if "%" in command:  # cron turns % into a newline
        raise ValueError(f"'%' in {command!r}: cron would turn it into a newline; drop it")
    if "\n" in command:
        raise ValueError("an override holds a newline; a crontab entry is one line")
    return command


def log_path(project: Path, name: str) -> Path:
    return project / "multirun" / "schedule" / f"{name}.log"


def crontab_line(cron: Cron, command: str, log: Path) -> str:
    """One line for a plain crontab (the output of every step appended to `log`)."""
    return f"{cron.expression} ( {command} ) >> {shlex.quote(str(log))} 2>&1"


def scrontab_block(
    name: str, cron: Cron, command: str, log: Path, slurm_options: Sequence[str] = ()
) -> str:
    """The schedule's block of a scrontab: markers, #SCRON options, the entry."""
    options = [f"--job-name=distbench-{name}", f"--output={log}", "--open-mode=append"]
    lines = [MARKER.format(name=name, edge="BEGIN") + " (re-run `distbench schedule` to replace)"]
    lines += [f"#SCRON {option}" for option in (*options, *slurm_options)]
    lines += [f"{cron.expression} {command}", MARKER.format(name=name, edge="END")]
    return "\n".join(lines) + "\n"


def merge_crontab(existing: str, name: str, block: str) -> str:
    """`existing` without this schedule's old block (if any), with `block` appended. Other
    lines, other schedules' blocks included, are kept as they are. ValueError when a BEGIN
    marker of this schedule has no END (fix it with `scrontab -e`)."""
    begin = MARKER.format(name=name, edge="BEGIN")
    end = MARKER.format(name=name, edge="END")
    kept: list[str] = []
    inside = False
    for line in existing.splitlines():
        if line == begin or line.startswith(begin + " "):
            inside = True
        elif inside and line == end:
            inside = False
        elif not inside:
            kept.append(line)
    if inside:
        raise ValueError(f"the crontab has {begin!r} but no {end!r}; fix it with scrontab -e")
    while kept and not kept[-1].strip():
        kept.pop()
    text = "\n".join(kept)
    return (text + "\n" if text else "") + block


def check_slurm_options(options: Sequence[str]) -> list[str]:
    for option in options:
        if not option.startswith("-") or "\n" in option or "%" in option:
            raise ValueError(
                f"--slurm-option {option!r} is not one sbatch option like --gres=gpu:4"
            )
    return list(options)


def sbatch_command(
    name: str, command: str, begin: dt.datetime, log: Path, slurm_options: Sequence[str] = ()
) -> str:
    """The one-shot sbatch equivalent of the next occurrence."""
    args = [
        "sbatch",
        f"--begin={begin.strftime('%Y-%m-%dT%H:%M:%S')}",
        f"--job-name=distbench-{name}",
        f"--output={log}",
        "--open-mode=append",
        *slurm_options,
        f"--wrap={command}",
    ]
    return " ".join(shlex.quote(a) for a in args)


# --------------------------------------------------------------------------- scrontab I/O


def read_scrontab(scrontab: str = "scrontab") -> str:
    """The user's current scrontab ('' when they have none). RuntimeError when scrontab fails
    otherwise (e.g. disabled on this cluster)."""
    listed = subprocess.run([scrontab, "-l"], capture_output=True, text=True, timeout=60)
    if listed.returncode == 0:
        return listed.stdout
    message = (listed.stderr or listed.stdout).strip()
    if "no crontab" in message.lower():
        return ""
    raise RuntimeError(f"`{scrontab} -l` failed: {message.splitlines()[0] if message else '?'}")


def install_scrontab(name: str, block: str, scrontab: str = "scrontab") -> str:
    """Replace this schedule's block in the user's scrontab; returns the installed text."""
    import tempfile

    text = merge_crontab(read_scrontab(scrontab), name, block)
    with tempfile.NamedTemporaryFile("w", suffix=".scrontab") as file:
        file.write(text)
        file.flush()
        done = subprocess.run(
            [scrontab, file.name], capture_output=True, text=True, timeout=60, check=False
        )
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip()
        raise RuntimeError(
            f"`{scrontab} FILE` failed: {message.splitlines()[0] if message else '?'}"
        )
    return text
