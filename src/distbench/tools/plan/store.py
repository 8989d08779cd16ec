"""What the tracking store adds to a plan: the measured links (α-β fits of its collectives
runs) and each row's error bars (the observed error of earlier runs' predictions). Neither is
needed: without a store, or with one that cannot be read, the plan stands on the constants and
says why (tools/plan/, `distbench plan --measured-links`, `--calibrated`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from distbench.figures.links import LinkFit
from distbench.figures.pred_error import ErrorBar


def open_store(tracking: Any, what: str) -> tuple[str | None, str]:
    """(the tracking URI, where: the store and experiment, masked) when `tracking` names a
    store that exists; else (None, a line saying why there are no `what`)."""
    from distbench.tracking.pred_history import store_exists
    from distbench.tracking.secrets_mask import mask_text
    from distbench.tracking.sweep import resolve_tracking_uri

    uri = None if tracking is None else resolve_tracking_uri(tracking, Path.cwd())
    if uri is None:
        return None, f"no {what}: tracking=none"
    where = f"{mask_text(uri)} (experiment {tracking.experiment_name})"
    if not store_exists(uri):
        return None, f"no {what}: no store at {where}"
    return uri, where


def stored_link_fits(tracking: Any, hardware: str) -> tuple[dict[str, LinkFit], str]:
    """tier -> LinkFit of the store's collectives runs of `hardware`, and a line saying where
    they came from or why there are none (never raises: the plan falls back to constants)."""
    from distbench.tracking.pred_history import load_link_fits

    uri, where = open_store(tracking, "measured links")
    if uri is None:
        return {}, where
    try:
        fits = load_link_fits(uri, tracking.experiment_name, hardware)
    except Exception as exc:  # the plan stands on the constants
        return {}, f"no measured links: {where} could not be read ({type(exc).__name__})"
    if not fits:
        return {}, f"no measured links: no collectives run of hardware={hardware} in {where}"
    tiers = ", ".join(
        f"{tier}-node {f.busbw_gbps:.3g} GB/s α {f.alpha_s * 1e6:.3g} µs (n={f.num_runs})"
        for tier, f in sorted(fits.items(), reverse=True)
    )
    return fits, f"measured links from {where}: {tiers}"


def strategy_error_bars(
    tracking: Any, keys: dict[str, dict[str, str]], time_sources: dict[str, str]
) -> tuple[dict[str, dict[str, ErrorBar]], str]:
    """strategy -> kind -> ErrorBar from the finished runs in the store `tracking` resolves to
    (the plan's model and hardware; step time: of the runs predicted by the row's
    `time_sources` entry), and a line saying where they came from; ({}, why) when there is no
    store or it cannot be read."""
    from distbench.figures.pred_error import pred_key
    from distbench.tracking.pred_history import load_error_bars

    uri, where = open_store(tracking if keys else None, "error bars")
    if uri is None:
        return {}, where
    common = {k: v for k, v in next(iter(keys.values())).items() if k in ("model", "hardware")}
    try:
        by_source = {
            source: load_error_bars(uri, tracking.experiment_name, common, source)
            for source in set(time_sources.values())
        }
    except Exception as exc:  # the plan stands without its error bars
        return {}, f"no error bars: {where} could not be read ({type(exc).__name__})"
    bars: dict[str, dict[str, ErrorBar]] = {}
    counted: dict[Any, int] = {}
    for row, tags in keys.items():
        by_key = by_source[time_sources[row]]
        if (key := pred_key(tags)) in by_key:
            bars[row] = by_key[key]
            counted[key] = max(b.num_runs for b in by_key[key].values())
    # rows may share a key (--search: layouts of one strategy file): count each key's runs once
    num_runs = sum(counted.values())
    return bars, (
        f"error bars (median (pred − measured)/measured ± MAD, n) from {num_runs} finished "
        f"runs, for {len(bars)} of these {len(keys)} rows, in {where}"
    )
