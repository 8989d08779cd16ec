"""Where each figure of a plan's step time came from (figures/links.py's wording): the compute
rate, the links within and between nodes, the latency per collective; `distbench plan` prints
them under the table and `--json` carries them as `sources`.
"""

from __future__ import annotations

from typing import Any

from distbench.compose.schema import HardwareConfig
from distbench.figures.links import LinkFit, efficiency_source, link_source
from distbench.probes.parts import Measurements

MEASURED_PARTS_SOURCE = (
    "the micro-batch's measured parts: GEMMs at the model's shapes, other kernels at the "
    "measured bandwidth, host time per kernel (hardware.time_source=measured); ZeRO-3 "
    "on a GPU adds its engine's host work, probed on one rank (workloads/train/engine_probe.py)"
)
NO_INTER_NODE_LINK = "none known (groups across nodes use the intra-node link)"


def figure_sources(
    hardware: HardwareConfig | None,
    measured: Measurements | None,
    fits: dict[str, LinkFit],
    efficiency: float | None,
    bandwidth_gbps: float | None,
    latency_s: float | None,
) -> dict[str, str]:
    """Where the step time's figures came from (figures/links.py): compute rate, links within
    and between nodes, per-collective latency; `measured`: the job's measurements."""
    if hardware is None:
        return {}
    measured = measured or Measurements()
    from distbench.figures.communication import default_latency_s

    intra, inter = fits.get("intra"), fits.get("inter")
    intra_node = _source(
        hardware,
        intra,
        bandwidth_gbps,
        hardware.interconnect_gbps,
        measured.measured_interconnect_gbps,
        "DEFAULT_CPU_INTERCONNECT_GBPS",
    )
    inter_node = NO_INTER_NODE_LINK
    if inter or hardware.internode_gbytes_per_s or measured.measured_internode_gbytes_per_s:
        inter_node = _source(
            hardware,
            inter,
            None,
            hardware.internode_gbytes_per_s,
            measured.measured_internode_gbytes_per_s,
            "",
        )
    default_us = default_latency_s(hardware.device) * 1e6
    latency = _source(
        hardware,
        intra,
        latency_s,
        None,
        measured.link_latency_us,
        f"DEFAULT_LATENCY_S[{hardware.device}] = {default_us:g} µs",
    )
    return {
        "compute": compute_source(hardware, measured, efficiency),
        "intra_node_link": intra_node,
        "inter_node_link": inter_node,
        "latency": latency,
    }


def compute_source(
    hardware: HardwareConfig, measured: Measurements, efficiency: float | None
) -> str:
    """The measured parts where the job carries them, else the efficiency model's peak."""
    from distbench.figures.step_time import measured_parts_s

    if measured_parts_s(hardware, measured) is not None:
        return MEASURED_PARTS_SOURCE
    return efficiency_source(efficiency, hardware.peak_source, hardware.train_efficiency)


def _source(
    hardware: HardwareConfig,
    fit: LinkFit | None,
    override: Any,
    figure: float | None,
    measured: Any,
    constant: str,
) -> str:
    """link_source, or the store's fit where link_source=measured filled `measured` (the fits
    resolved into the job's measurements)."""
    resolved = hardware.link_source == "measured"
    if resolved and measured is not None and fit is None and override is None:
        return "the store's collectives α-β fit (hardware.link_source=measured)"
    return link_source(fit, override, figure, constant)
