"""The host's load around one job: what else ran on the machine while its ranks were timed, so
that a figure from an oversubscribed host is recorded as such, not compared as if clean.

Read from Linux's /proc: the load averages and the tasks runnable right now (/proc/loadavg), and
the CPU time split into busy, idle and stolen (the `cpu` line of /proc/stat). Parsing and the
rules are pure functions; `sample()` reads the files (None off Linux).

Linux's load averages are exponentially damped moving averages of the runnable (and
uninterruptible) tasks, updated every 5 s (kernel/sched/loadavg.c). The 1-minute one therefore
lags: right after a 4-rank job it still says ~3.5 on a host now idle. So the rule at a job's
start uses the tasks runnable *now* (the median of a few reads, less the reader itself), and the
load *during* the job is recovered from the 1-minute averages at its start and end:

    L_end = L_start · d + L_job · (1 − d),   d = exp(−elapsed / 60 s)

    python -m distbench.probes.host_load      # this host now, as one JSON line
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

LOADAVG = Path("/proc/loadavg")
PROC_STAT = Path("/proc/stat")
LOAD_1M_TAU_S = 60.0  # the 1-minute load average's time constant (kernel/sched/loadavg.c)
# Below this a job's own load cannot be told from the averages: they move every 5 s only, and
# (1 − d) is small, so the loadavg's 0.01 steps and its 5-s phase dominate the estimate.
MIN_JOB_S_FOR_LOAD = 30.0
# What a job runs beside its ranks (the orchestrator's threads, torchrun's agent, mostly asleep):
# the runnable tasks may exceed the cores by this much before the host counts as oversubscribed.
LOAD_MARGIN = 0.5
# Stolen CPU time (a hypervisor running other guests on this VM's cores) above this share of the
# job's CPU time makes its timings another machine's.
STEAL_WARN_PCT = 10.0
RUNNABLE_READS = 5
RUNNABLE_GAP_S = 0.01


@dataclass(frozen=True)
class CpuTimes:
    """Jiffies of all CPUs since boot (/proc/stat `cpu` line): busy (user, nice, system, irq,
    softirq), idle (idle, iowait) and stolen."""

    busy: int
    idle: int
    steal: int

    @property
    def total(self) -> int:
        return self.busy + self.idle + self.steal


@dataclass(frozen=True)
class HostSample:
    """The host at one instant."""

    time_s: float  # time.monotonic()
    load_1m: float
    runnable_others: float  # tasks runnable now besides the reader (median of a few reads)
    cpu: CpuTimes | None
    cores: int  # the host's logical CPUs (os.cpu_count: what its load averages are out of)


def parse_loadavg(text: str) -> tuple[float, int]:
    """(1-minute load average, tasks runnable now) of /proc/loadavg: `0.52 0.58 0.59 3/129 …`."""
    fields = text.split()
    return float(fields[0]), int(fields[3].split("/")[0])


def parse_cpu_times(text: str) -> CpuTimes:
    """The `cpu` line of /proc/stat: user nice system idle iowait irq softirq steal (guest
    time is already inside user and nice, so it is not added again)."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            values += [0] * (8 - len(values))
            user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
            return CpuTimes(user + nice + system + irq + softirq, idle + iowait, steal)
    raise ValueError("no `cpu` line in /proc/stat")


def steal_pct(start: CpuTimes, end: CpuTimes) -> float | None:
    """Stolen share of the CPU time between two readings, in % (None: no time passed)."""
    total = end.total - start.total
    return 100.0 * (end.steal - start.steal) / total if total > 0 else None


def busy_pct(start: CpuTimes, end: CpuTimes) -> float | None:
    """Busy share of all CPUs' time between two readings, in % (None: no time passed)."""
    total = end.total - start.total
    return 100.0 * (end.busy - start.busy) / total if total > 0 else None


def job_load(load_start: float, load_end: float, elapsed_s: float) -> float | None:
    """The mean runnable tasks during a job of `elapsed_s`, from the 1-minute load averages at
    its start and end (the module docstring's formula); None for a job shorter than
    MIN_JOB_S_FOR_LOAD."""
    if elapsed_s < MIN_JOB_S_FOR_LOAD:
        return None
    decay = math.exp(-elapsed_s / LOAD_1M_TAU_S)
    return max(0.0, (load_end - load_start * decay) / (1.0 - decay))


def start_reasons(
    ranks_here: int, usable_cores: int, start: HostSample | None, workers: str = "rank"
) -> list[str]:
    """Why the job's figures are oversubscribed, known before its ranks start: more ranks than
    the cores this process may use, or other runnable tasks that leave its ranks less than a
    core each. `workers` names what is counted (a probe's threads)."""
    reasons = []
    if ranks_here > usable_cores:
        reasons.append(f"{ranks_here} {workers}s on {usable_cores} cores")
    elif start is not None and start.runnable_others + ranks_here > start.cores + LOAD_MARGIN:
        reasons.append(
            f"{start.runnable_others:g} other runnable task(s) beside {ranks_here} {workers}(s) "
            f"on {start.cores} cores"
        )
    return reasons


def end_reasons(start: HostSample | None, end: HostSample | None) -> list[str]:
    """Why, seen once the ranks are done: a load during the job above the cores, or stolen
    CPU time above STEAL_WARN_PCT."""
    if start is None or end is None:
        return []
    reasons = []
    during = job_load(start.load_1m, end.load_1m, end.time_s - start.time_s)
    if during is not None and during > end.cores + LOAD_MARGIN:
        reasons.append(f"load {during:.1f} during the job on {end.cores} cores")
    stolen = steal_pct(start.cpu, end.cpu) if start.cpu and end.cpu else None
    if stolen is not None and stolen > STEAL_WARN_PCT:
        reasons.append(f"{stolen:.0f} % of the CPU time stolen by the hypervisor")
    return reasons


def host_metrics(start: HostSample | None, end: HostSample | None) -> dict[str, float]:
    """What a run records of its host: host_cores, host_load_1m_start / _end, the runnable
    tasks beside the job at its start, and over the job its load (when long enough), busy and
    stolen CPU shares."""
    out: dict[str, float] = {}
    if start is not None:
        out["host_cores"] = float(start.cores)
        out["host_load_1m_start"] = start.load_1m
        out["host_runnable_others_start"] = start.runnable_others
    if end is not None:
        out["host_load_1m_end"] = end.load_1m
    if start is not None and end is not None:
        during = job_load(start.load_1m, end.load_1m, end.time_s - start.time_s)
        if during is not None:
            out["host_load_during_job"] = during
        if start.cpu and end.cpu:
            for name, value in (
                ("host_steal_pct", steal_pct(start.cpu, end.cpu)),
                ("host_busy_pct", busy_pct(start.cpu, end.cpu)),
            ):
                if value is not None:
                    out[name] = value
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def sample(reads: int = RUNNABLE_READS, gap_s: float = RUNNABLE_GAP_S) -> HostSample | None:
    """The host now; None where /proc/loadavg cannot be read (not Linux)."""
    texts = []
    for i in range(reads):
        text = _read(LOADAVG)
        if text is None:
            return None
        texts.append(text)
        if i + 1 < reads:
            time.sleep(gap_s)
    parsed = [parse_loadavg(t) for t in texts]
    runnable = statistics.median(max(0, running - 1) for _, running in parsed)  # less the reader
    stat = _read(PROC_STAT)
    try:
        cpu = parse_cpu_times(stat) if stat is not None else None
    except ValueError:
        cpu = None
    return HostSample(time.monotonic(), parsed[-1][0], runnable, cpu, os.cpu_count() or 1)


if __name__ == "__main__":
    now = sample()
    print(json.dumps(None if now is None else host_metrics(now, None)))
