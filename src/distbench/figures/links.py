"""The links and the compute rate a step-time prediction uses, and where each figure came from:
an α-β fit per link tier from the collectives workload's stored runs when there are any, else
the hardware's figures, else the constants, with the fallback named.

    distbench plan --measured-links model=tiny world_size=2 hardware=cpu
    python -c "from distbench.figures.links import *; print(link_fits([]))"

The collectives workload logs per collective the α-β (Hockney) fit of its size sweep
(`alpha_s.<op>`, `beta_busbw_gbps.<op>`: workloads/collectives/metrics.py::fit_alpha_beta).
The planner's communication term is bytes sent per device / link rate
(communication.comm_time_s, ring volumes), so the rate to compare with is the bus bandwidth
(nccl-tests PERFORMANCE.md: busbw is what a link carries, whatever the collective);
all_reduce is used, the data-parallel gradient reduction. A run on one node measures the
intra-node tier, one on several nodes the inter-node tier (a ring runs at its slowest hop).
Over several runs of a tier: the median.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

FIT_COLLECTIVE = "all_reduce"


@dataclass(frozen=True)
class LinkFit:
    """One link tier measured by the collectives workload: α (s per collective), bus
    bandwidth (GB/s per device), over num_runs runs."""

    alpha_s: float
    busbw_gbps: float
    num_runs: int


def link_tier(tags: dict[str, str]) -> str:
    """`inter` for a run whose ranks span nodes (tag num_nodes > 1), else `intra`."""
    try:
        return "inter" if int(tags.get("num_nodes", "1")) > 1 else "intra"
    except ValueError:
        return "intra"


def link_fits(runs: Iterable[Any], op: str = FIT_COLLECTIVE) -> dict[str, LinkFit]:
    """tier -> LinkFit: the median α and bus bandwidth of `op` over the FINISHED collectives
    runs that fitted both (a latency-bound sweep has no bandwidth, and is skipped)."""
    points: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        metrics = run.data.metrics
        alpha, busbw = metrics.get(f"alpha_s.{op}"), metrics.get(f"beta_busbw_gbps.{op}")
        if run.info.status != "FINISHED" or alpha is None or not busbw or busbw <= 0:
            continue
        points.setdefault(link_tier(run.data.tags), []).append((max(alpha, 0.0), busbw))
    return {
        tier: LinkFit(
            alpha_s=statistics.median(a for a, _ in pts),
            busbw_gbps=statistics.median(b for _, b in pts),
            num_runs=len(pts),
        )
        for tier, pts in points.items()
    }


def link_fit_fields(fits: dict[str, LinkFit]) -> dict[str, Any]:
    """The fields of a job's measurements (probes/parts.py Measurements) that carry the fits
    into a prediction under hardware.link_source=measured: each tier's bus bandwidth and the
    intra-node α."""
    fields: dict[str, Any] = {}
    if "intra" in fits:
        fields["measured_interconnect_gbps"] = fits["intra"].busbw_gbps
        fields["link_latency_us"] = fits["intra"].alpha_s * 1e6
    if "inter" in fits:
        fields["measured_internode_gbytes_per_s"] = fits["inter"].busbw_gbps
    return fields


def link_source(
    fit: LinkFit | None, override: float | None, hardware_gbps: float | None, constant: str
) -> str:
    """Where a link figure came from, for the plan's output: the option, the fit, the
    hardware's figure or the constant it fell back to."""
    if override is not None:
        return "the command line"
    if fit is not None:
        return f"the α-β fit of {fit.num_runs} stored collectives run(s) ({FIT_COLLECTIVE} busbw)"
    if hardware_gbps:
        return "the hardware's figure"
    return f"{constant} (constant)"


def efficiency_source(
    override: float | None, peak_source: str | None, catalog_efficiency: float | None = None
) -> str:
    """Where the compute term's rate came from: the efficiency (the option, the hardware's
    train_efficiency, or the DEFAULT_EFFICIENCY constant) times the peak (measured GEMM, or
    the catalog's)."""
    if override is not None:
        eff = "--efficiency"
    elif catalog_efficiency is not None:
        eff = f"hardware.train_efficiency ({catalog_efficiency:g})"
    else:
        eff = "DEFAULT_EFFICIENCY (constant)"
    peak = (
        "the measured GEMM peak (hardware.peak_source=measured)"
        if peak_source == "measured"
        else "the catalog peak (hardware.peak_source=catalog; =measured times this device)"
    )
    return f"{eff} × {peak}"
