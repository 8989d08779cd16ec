"""The host around each job's ranks (probes/host_load.py): sampled just before they start and
just after they end, recorded as the run's `host_*` metrics (load averages at start and end,
the load during the job, busy and stolen CPU shares), and, when the figures are oversubscribed
(more ranks than cores, other work competing, a hypervisor stealing), one warning line and the
tags `oversubscribed=true` and `oversubscribed_reason`. `distbench compare` judges nothing from
one oversubscribed run a side.

    python run.py world_size=8     # 2 cores: "warning: oversubscribed host (8 ranks on 2 cores)"
"""

from __future__ import annotations

from dataclasses import dataclass, field

from distbench.orchestrator.outcome import Outcome
from distbench.probes import host_load
from distbench.probes.detect import num_cpu_cores
from distbench.workloads import Measured

OVERSUBSCRIBED_TAG = "oversubscribed"  # public: users filter runs on it (and compare reads it)
REASON_TAG = "oversubscribed_reason"


@dataclass
class HostWatch:
    """One job's host samples and the reasons found so far; warns once."""

    label: str
    start: host_load.HostSample | None
    reasons: list[str] = field(default_factory=list)
    warned: bool = False
    stopped: host_load.HostSample | None = None

    @classmethod
    def begin(cls, label: str, ranks_here: int, outcome: Outcome) -> HostWatch:
        """Sample the host before the ranks start; warn (and tag the outcome, so the live run
        shows it) when the ranks cannot each have a core."""
        start = host_load.sample()
        watch = cls(label, start, host_load.start_reasons(ranks_here, num_cpu_cores(), start))
        watch._flag(outcome)
        return watch

    def stop(self) -> None:
        """Sample the host the moment the ranks are done (what runs after them, a post-run
        probe, is not the job's)."""
        self.stopped = host_load.sample()

    def end(self, measured: Measured, outcome: Outcome) -> None:
        """The host metrics and any new reason, from the sample taken at `stop` (now if none)."""
        end = self.stopped or host_load.sample()
        measured.metrics.update(host_load.host_metrics(self.start, end))
        self.reasons += [r for r in host_load.end_reasons(self.start, end) if r not in self.reasons]
        tags = self._flag(outcome)
        measured.tags.update(tags)

    def _flag(self, outcome: Outcome) -> dict[str, str]:
        if not self.reasons:
            return {}
        tags = {OVERSUBSCRIBED_TAG: "true", REASON_TAG: "; ".join(self.reasons)}
        outcome.update(tags)
        if not self.warned:
            self.warned = True
            print(
                f"distbench: {self.label}: warning: oversubscribed host ({tags[REASON_TAG]}): "
                "its timings are not comparable with a quiet host's",
                flush=True,
            )
        return tags
