"""`distbench plan`: every strategy's predicted memory, communication, step time and cost for one
model on one cluster shape, and the recommended strategy, before anything runs.

The config is composed exactly as run.py composes it (same conf/, same overrides), resolved
into a Job per strategy (refused ones are listed with their one-line reason), and predicted
with analytic.predict. No process group is started and nothing is allocated.

    distbench plan model=llama3_8b world_size=8 hardware=h100_sxm
    distbench plan model=llama3_70b world_size=64 hardware=h100_sxm workload.dtype=bf16 --json
    distbench plan --strategies dp,zero3 hardware=auto
    distbench plan --search model=llama3_70b world_size=64 hardware=h100_sxm batch=large
    distbench plan --calibrated model=tiny world_size=2     # predictions ÷ (1 + observed error)

`--json` prints one JSON list: one object per validated strategy (`strategy`, `world_size`,
`dp`, `tp`, `pp`, `zero_stage`, `num_params`, `mem_bytes` {params, grads, optimizer,
activations, host, total} per device, `fits`, `comm_bytes_per_step`, `step_time_s`,
`tokens_per_s`, `cost_usd_per_1m_tokens`, `recommended`, ...), then one final object with
`recommendation` (a strategy name, or null when nothing fits), `reason`, `refused`
{strategy: reason}, the resolved `hardware` and `warnings` (e.g. a ≥1B model planned with the
CPU default batch=small).

Next to each prediction of peak memory and step time, the plan shows its error bar where the
tracking store (`tracking=...`, as run.py would log to; the `distbench` experiment) holds
finished runs of the same model, strategy, ZeRO stage, hardware and precision: the median
relative error (pred − measured)/measured ± its median absolute deviation, and n
(figures/pred_error.py), e.g. `0.612 (+12 % ±4 %, n=3)`. `--calibrated` divides each
prediction by (1 + median), and recommends from the calibrated figures. `--json` adds
`pred_error` {mem, time: {median_rel_err, spread_rel_err, num_runs}} to each row, and
`calibrated` and `history` (where the error bars came from) to the final object.

`--search` does not take the strategy files' degrees as given: from DeepSpeed's dp (ZeRO 0-3)
and torch's ddp and fsdp it derives every (dp, tp, pp) of powers of two × micro-batch 1-8,
resolves each as run.py would (refusals keep the engine's reason), predicts it, ranks those that
fit by tokens/s and lists the rest by reason (`--json`: {ranked, refused, warnings}).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distbench.compose.hardware import left_unmeasured
from distbench.compose.schema import HardwareConfig
from distbench.figures.analytic import PREFERENCE, Prediction, predict, recommend
from distbench.figures.links import LinkFit, efficiency_source, link_fit_fields, link_source
from distbench.figures.metrics import GIB
from distbench.figures.pred_error import ErrorBar, calibrated_prediction, with_error


def project_dir() -> Path:
    """The directory holding conf/: $DISTBENCH_HOME, else the parent of src/ (this package's
    checkout), else the working directory."""
    candidates = [Path(os.environ["DISTBENCH_HOME"])] if os.environ.get("DISTBENCH_HOME") else []
    candidates += [Path(__file__).resolve().parents[3], Path.cwd()]
    for candidate in candidates:
        if (candidate / "conf" / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        f"no conf/config.yaml under {', '.join(map(str, candidates))}; set DISTBENCH_HOME"
    )


@dataclass
class Plan:
    predictions: list[Prediction]
    refused: dict[str, str]
    recommendation: str | None
    reason: str
    hardware: dict[str, Any]
    title: str
    dtype: str = "fp32"
    extra: dict[str, Any] = field(default_factory=dict)
    # strategy -> kind (mem, time) -> the observed error of its predictions (pred_error.py)
    error_bars: dict[str, dict[str, ErrorBar]] = field(default_factory=dict)
    calibrated: bool = False
    history: str = ""  # where the error bars came from, or why there are none


def _split_strategy_override(overrides: list[str]) -> tuple[list[str], list[str] | None]:
    """`strategy=a,b` among the overrides picks the strategies instead of fixing one."""
    rest, chosen = [], None
    for item in overrides:
        if item.startswith("strategy="):
            chosen = [s for s in item.split("=", 1)[1].split(",") if s]
        else:
            rest.append(item)
    return rest, chosen


def strategy_options(conf_dir: Path) -> list[str]:
    """conf/strategy options, least sharded first (analytic.PREFERENCE), then the rest."""
    names = [p.stem for p in (conf_dir / "strategy").glob("*.yaml")]
    return sorted(names, key=lambda n: (PREFERENCE.index(n) if n in PREFERENCE else 99, n))


def _host_mem_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 / GIB
    except OSError:
        return None
    return None


def make_plan(
    overrides: list[str],
    strategies: list[str] | None = None,
    *,
    efficiency: float | None = None,
    bandwidth_gbps: float | None = None,
    latency_s: float | None = None,
    recompute: bool = False,
    history: bool = False,
    calibrated: bool = False,
    measured_links: bool = False,
) -> Plan:
    """Compose, resolve and predict every strategy; recommend one. With `history`, each
    prediction gets the error bar of the tracking store's earlier runs of its kind, and with
    `calibrated` too, is divided by it before the recommendation. With `measured_links`, the
    links are the α-β fits of the store's collectives runs of this hardware, per tier, where
    there are any (figures/links.py); `extra["sources"]` names where each figure came from."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from distbench.compose.schema import ConfigError, register_configs
    from distbench.job import resolve_job

    home = project_dir()
    conf_dir = home / "conf"
    os.environ.setdefault("DISTBENCH_HOME", str(home))  # conf/config.yaml's searchpath
    register_configs()
    overrides, from_overrides = _split_strategy_override(efficiency_model(overrides, efficiency))
    names = strategies or from_overrides or strategy_options(conf_dir)

    predictions, refused = [], {}
    warnings: list[str] = []
    hardware: HardwareConfig | None = None
    plan_fields: dict[str, Any] = {}  # what the plan sets on every row's own hardware
    title, dtype = "", "fp32"
    keys: dict[str, dict[str, str]] = {}  # strategy -> the tags its runs are found by
    time_sources: dict[str, str] = {}  # strategy -> how its step time is predicted
    tracking = None
    fits: dict[str, LinkFit] = {}
    link_note = ""
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        for name in names:
            cfg = compose(config_name="config", overrides=[*overrides, f"strategy={name}"])
            with open_dict(cfg):
                cfg.pop("hydra", None)
            try:
                job = resolve_job(cfg, conf_dir)
            except ConfigError as exc:
                refused[name] = str(exc)
                continue
            if not job.builds_model:  # gemm, collectives: no model, no training step
                refused[name] = (
                    f"workload={job.workload.name} builds no model; distbench plan predicts "
                    "training (workload=train)"
                )
                continue
            if job.world_size_requested:  # the one-device baseline, pinned to one rank
                refused[name] = (
                    f"strategy={name} runs on one device, got "
                    f"world_size={job.world_size_requested}; use world_size=1 (run.py runs it "
                    "on one rank in any sweep) or strategy=ddp"
                )
                continue
            if hardware is None:  # one hardware group per plan; auto is detected once
                if job.hardware.device == "cpu" and job.hardware.mem_gib is None:
                    host = _host_mem_gib()  # ranks on one host share its memory
                    nproc = job.topology.ranks_per_node
                    plan_fields["mem_gib"] = None if host is None else host / nproc
                dtype = job.dtype
                tracking = cfg.tracking
                if measured_links:  # the same fields hardware.link_source=measured fills
                    fits, link_note = stored_link_fits(tracking, job.hardware.name)
                    plan_fields.update(link_fit_fields(fits) if fits else {})
                # the rows' time fields are their own (each strategy's measured parts)
                hardware = dataclasses.replace(job.hardware, **plan_fields)
                batch = job.batch
                warnings += batch_warnings(job, overrides)
                title = (
                    f"distbench plan: model={job.model.name} "
                    f"world_size={job.world_size} hardware={hardware.name} "
                    f"dtype={dtype} batch={batch.name} "
                    f"(micro_batch {batch.micro_batch_size} × "
                    f"{batch.grad_accum_steps} × seq {batch.seq_len})"
                )
            keys[name] = run_key_tags(job)
            time_sources[name] = job.hardware.time_source
            predictions.append(
                predict(
                    job.replace(hardware=dataclasses.replace(job.hardware, **plan_fields)),
                    efficiency=efficiency,
                    bandwidth_gbps=bandwidth_gbps,
                    latency_s=latency_s,
                    recompute=recompute,
                )
            )
    bars, note = ({}, "") if not history else strategy_error_bars(tracking, keys, time_sources)
    # The stored runs predicted on their own links (KEY_TAGS has no link source).
    if hardware is not None and hardware.link_source == "measured" and bars:
        bars = {s: {k: b for k, b in kinds.items() if k != "time"} for s, kinds in bars.items()}
        note += "; no step-time error bars with measured links (observed on the runs' links)"
    sources = figure_sources(hardware, fits, efficiency, bandwidth_gbps, latency_s)
    if calibrated:
        predictions = [
            calibrated_prediction(p, bars[p.strategy]) if bars.get(p.strategy) else p
            for p in predictions
        ]
    best, reason = recommend(predictions)
    return Plan(
        predictions=predictions,
        refused=refused,
        recommendation=best,
        reason=reason,
        hardware=_hardware_dict(hardware),
        title=title or "distbench plan",
        dtype=dtype,
        extra={"warnings": warnings, "sources": sources, "links": link_note},
        error_bars=bars,
        calibrated=calibrated,
        history=note,
    )


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


def figure_sources(
    hardware: HardwareConfig | None,
    fits: dict[str, LinkFit],
    efficiency: float | None,
    bandwidth_gbps: float | None,
    latency_s: float | None,
) -> dict[str, str]:
    """Where the step time's figures came from (figures/links.py): compute rate, links within
    and between nodes, per-collective latency."""
    if hardware is None:
        return {}
    from distbench.figures.analytic import default_latency_s, measured_parts_s

    intra, inter = fits.get("intra"), fits.get("inter")
    resolved = hardware.link_source == "measured"  # fits resolved into the hardware's fields

    def source(
        fit: LinkFit | None, override: Any, figure: float | None, measured: Any, constant: str
    ) -> str:
        """link_source, or the store's fit where link_source=measured filled `measured`."""
        if resolved and measured is not None and fit is None and override is None:
            return "the store's collectives α-β fit (hardware.link_source=measured)"
        return link_source(fit, override, figure, constant)

    intra_node = source(
        intra,
        bandwidth_gbps,
        hardware.interconnect_gbps,
        hardware.measured_interconnect_gbps,
        "DEFAULT_CPU_INTERCONNECT_GBPS",
    )
    inter_node = "none known (groups across nodes use the intra-node link)"
    if inter or hardware.internode_gbytes_per_s or hardware.measured_internode_gbytes_per_s:
        inter_node = source(
            inter,
            None,
            hardware.internode_gbytes_per_s,
            hardware.measured_internode_gbytes_per_s,
            "",
        )
    default_us = default_latency_s(hardware.device) * 1e6
    latency = source(
        intra,
        latency_s,
        None,
        hardware.link_latency_us,
        f"DEFAULT_LATENCY_S[{hardware.device}] = {default_us:g} µs",
    )
    return {
        "compute": (
            "the micro-batch's measured parts: GEMMs at the model's shapes, other kernels at the "
            "measured bandwidth, host time per kernel (hardware.time_source=measured); ZeRO-3 "
            "on a GPU adds its engine's host work, probed on one rank (compose/engine_probe.py)"
            if measured_parts_s(hardware) is not None
            else efficiency_source(efficiency, hardware.peak_source)
        ),
        "intra_node_link": intra_node,
        "inter_node_link": inter_node,
        "latency": latency,
    }


def run_key_tags(job: Any) -> dict[str, str]:
    """The tags (pred_error.KEY_TAGS) a run of this job carries (orchestrator.describe)."""
    from distbench.figures.pred_error import KEY_TAGS
    from distbench.orchestrator import describe

    tags = describe(job)
    return {name: tags[name] for name in KEY_TAGS}


def efficiency_model(overrides: list[str], efficiency: float | None) -> list[str]:
    """The overrides, with `hardware.time_source=efficiency` when an efficiency is given and
    the time source is not: an efficiency asked for is the efficiency model, not the measured
    parts that the default (auto) would use on this machine."""
    named = any(o.lstrip("+").startswith("hardware.time_source=") for o in overrides)
    if efficiency is None or named:
        return list(overrides)
    return [*overrides, "hardware.time_source=efficiency"]


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


# A model this large planned with the CPU-sized default batch says nothing about its training.
LARGE_MODEL_PARAMS = 1e9


def batch_warnings(job: Any, overrides: list[str]) -> list[str]:
    """Warn when a ≥1B-parameter model is planned with batch=small (seq_len 128), the CPU
    default, unless the user chose the batch: activations, communication per token and the
    recommendation all depend on it."""
    from distbench.ranks.models import count_params

    chose_batch = any(o.split("=", 1)[0].lstrip("+").startswith("batch") for o in overrides)
    num_params = count_params(job.model)["total"]
    if num_params < LARGE_MODEL_PARAMS or chose_batch or job.batch.name != "small":
        return []
    return [
        f"model={job.model.name} has {num_params / 1e9:.1f}B parameters but batch=small "
        f"(micro_batch {job.batch.micro_batch_size}, seq_len {job.batch.seq_len}) is the CPU "
        "default; plan with the batch you will train with, e.g. batch=medium or batch=large "
        "(seq_len 2048)"
    ]


# HardwareConfig fields that resolving the figures fills in only when it has something to say
# (hardware=auto's device, a measured peak's catalog figures, a failed calibration).
RESOLUTION_NOTES = (
    "detected",
    "catalog_peak_tflops_fp32",
    "catalog_peak_tflops_bf16",
    "catalog_peak_tflops_fp16",
    "peak_calibration_error",
)


def _hardware_dict(hardware: HardwareConfig | None) -> dict[str, Any]:
    """The plan's hardware as JSON: every figure, and the resolution notes that are set."""
    if hardware is None:
        return {}
    return {
        key: value
        for key, value in dataclasses.asdict(hardware).items()
        if value is not None or key not in RESOLUTION_NOTES
    }


def plan_json(plan: Plan) -> list[dict[str, Any]]:
    """The `--json` document: predictions, then the recommendation object (module docstring)."""
    rows = [
        {
            **p.as_dict(),
            "recommended": p.strategy == plan.recommendation,
            "pred_error": {k: b.as_dict() for k, b in plan.error_bars.get(p.strategy, {}).items()},
        }
        for p in plan.predictions
    ]
    rows.append(
        {
            "recommendation": plan.recommendation,
            "calibrated": plan.calibrated,
            "history": plan.history,
            "sources": plan.extra.get("sources", {}),
            "links": plan.extra.get("links", ""),
            "reason": plan.reason,
            "refused": plan.refused,
            "hardware": plan.hardware,
            "warnings": plan.extra.get("warnings", []),
        }
    )
    return rows


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def plan_table(plan: Plan) -> Any:
    from rich.table import Table

    cal = " cal." if plan.calibrated else ""
    table = Table(title=plan.title + (" (calibrated by the error bars)" if cal else ""))
    headers = (
        "strategy",
        "dp×tp×pp z",
        "params",
        "grads",
        "optim",
        "buffers",
        "activ",
        "total GiB" + cal,
        "fits",
        "comm GB/step",
        "step s" + cal,
        "tokens/s",
        "$/1M tok",
    )
    for header in headers:
        table.add_column(
            header,
            justify="left" if header == "strategy" else "right",
            no_wrap=header.startswith(("total", "step")),  # the error bar stays on its line
        )
    for p in plan.predictions:
        mem = p.mem
        fits = {True: "[green]yes[/green]", False: "[red]no[/red]", None: "?"}[p.fits]
        name = f"[bold]{p.strategy} ★[/bold]" if p.strategy == plan.recommendation else p.strategy
        layout = p.layout
        bars = plan.error_bars.get(p.strategy, {})
        table.add_row(
            name,
            f"{layout.dp}×{layout.tp}×{layout.pp} z{layout.zero_stage}",
            *(
                f"{v / GIB:.2f}"
                for v in (mem.params, mem.grads, mem.optimizer, mem.buffers, mem.activations)
            ),
            with_error(f"{mem.total / GIB:.2f}", bars.get("mem")),
            fits,
            f"{p.comm_bytes_per_step / 1e9:.3g}",
            with_error(_fmt(p.step_time_s, "{:.3g}"), bars.get("time")),
            _fmt(p.tokens_per_s, "{:,.0f}"),
            _fmt(p.cost_usd_per_1m_tokens, "{:.4g}"),
        )
    return table


def print_plan(plan: Plan) -> None:
    from rich.console import Console

    wide = 140 + (40 if plan.error_bars else 0)  # room for two error bars on one line
    console = Console(width=max(Console().width, wide))
    console.print(plan_table(plan))
    hw = plan.hardware
    if plan.predictions:
        a = plan.predictions[0].assumptions
        internode = a.get("internode_gbytes_per_s")
        console.print(
            f"per device: {hw.get('mem_gib') or 0:.1f} GiB, "
            f"peak {hw.get(f'peak_tflops_{plan.dtype}') or 0:.3g} TFLOP/s {plan.dtype} "
            f"({a.get('precision', plan.dtype)}), "
            + (
                "compute from measured parts; "
                if a.get("time_source") == "measured"
                else f"efficiency {a['efficiency']:.2f}; "
            )
            + f"{a.get('num_nodes', 1)} node(s) × {a.get('ranks_per_node', '?')} ranks, "
            f"link {a['bandwidth_gbps']:g} GB/s within a node"
            + (f", {internode:g} GB/s per device between nodes" if internode else "")
            + f", latency {a['latency_s'] * 1e6:g} µs per collective, "
            f"activations {'recomputed' if a['recompute'] else 'stored'}; total GiB is the "
            + (
                "process peak, its runtime included"
                if hw.get("device") == "cpu"
                else "CUDA max allocated; fits adds the CUDA context and 5 % fragmentation"
            ),
            highlight=False,
        )
        for p in plan.predictions:
            host = p.assumptions.get("host_mem_bytes_per_node") or 0.0
            if host:
                console.print(
                    f"{p.strategy} needs {host / GIB:.1f} GiB of host RAM per node "
                    "(DeepSpeed's estimator)",
                    highlight=False,
                )
    sources = plan.extra.get("sources") or {}
    if sources:
        console.print(
            "figures from: " + "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in sources.items()),
            highlight=False,
            markup=False,
        )
    if plan.extra.get("links"):
        console.print(plan.extra["links"], highlight=False)
    if plan.history:
        how = "; --calibrated divides them out" if not plan.calibrated else ", divided out"
        console.print(plan.history + (how if plan.error_bars else ""), highlight=False)
    for warning in plan.extra.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    for name, why in plan.refused.items():
        console.print(f"refused {name}: {why}", highlight=False)
    console.print(f"recommendation: {plan.reason}", highlight=False)


# --------------------------------------------------------------------------- layout search

# The base strategy each engine's layouts are derived from (degrees, ZeRO stage and micro
# batch are then set on it): DeepSpeed's dp with zero_stage 0-3, torch's ddp and fsdp.
SEARCH_BASES = (
    ("deepspeed", "dp", (0, 1, 2, 3)),
    ("torch", "ddp", (None,)),
    ("torch", "fsdp", (None,)),
)
SEARCH_MICRO_BATCHES = (1, 2, 4, 8)


@dataclass
class Search:
    """Every (engine, dp, tp, pp, ZeRO stage, micro batch) tried: those that fit, ranked by
    predicted tokens/s; the rest with their reason (the engine's refusal, or the memory)."""

    ranked: list[tuple[str, Prediction]]
    refused: dict[str, str]
    title: str
    warnings: list[str] = field(default_factory=list)
    # layout -> kind -> the error bar of the stored runs of its key (pred_error.KEY_TAGS: the
    # model, strategy file, ZeRO stage, hardware and precision, at whatever degrees they ran)
    error_bars: dict[str, dict[str, ErrorBar]] = field(default_factory=dict)
    history: str = ""  # where the error bars came from, or why there are none


def _degrees(world_size: int) -> list[tuple[int, int]]:
    """(tp, pp) pairs of powers of two whose product divides world_size."""
    powers = [2**i for i in range(world_size.bit_length()) if world_size % 2**i == 0]
    return [(tp, pp) for tp in powers for pp in powers if world_size % (tp * pp) == 0]


def search_layouts(
    overrides: list[str],
    *,
    micro_batches: tuple[int, ...] = SEARCH_MICRO_BATCHES,
    efficiency: float | None = None,
    recompute: bool = False,
    history: bool = True,
) -> Search:
    """`distbench plan --search`: derive every layout the engines allow from SEARCH_BASES at
    the overrides' world size, resolve each exactly as run.py would (refusals keep the
    engine's one-line reason), predict it, and rank those that fit by tokens/s. With
    `history`, each carries the error bar of its key's stored runs (strategy_error_bars)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from distbench.compose.schema import ConfigError, register_configs
    from distbench.job import resolve_job

    home = project_dir()
    conf_dir = home / "conf"
    os.environ.setdefault("DISTBENCH_HOME", str(home))
    register_configs()
    overrides, _ = _split_strategy_override(efficiency_model(overrides, efficiency))
    ranked: list[tuple[str, Prediction]] = []
    refused: dict[str, str] = {}
    keys: dict[str, dict[str, str]] = {}
    time_sources: dict[str, str] = {}
    warnings: list[str] = []
    title = "distbench plan --search"
    tracking = None
    hardware: HardwareConfig | None = None
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        for engine, base, stages in SEARCH_BASES:
            cfg = compose(config_name="config", overrides=[*overrides, f"strategy={base}"])
            with open_dict(cfg):
                cfg.pop("hydra", None)
            for (tp, pp), stage, mb in (
                (d, z, m) for d in _degrees(cfg.world_size) for z in stages for m in micro_batches
            ):
                dp = cfg.world_size // (tp * pp)
                label = f"{base if engine == 'torch' else 'deepspeed'} dp{dp} tp{tp} pp{pp}"
                label += f" z{stage} mb{mb}" if stage is not None else f" mb{mb}"
                candidate = cfg.copy()
                with open_dict(candidate):
                    candidate.strategy.tp, candidate.strategy.pp = tp, pp
                    candidate.strategy.dp = -1
                    candidate.batch.micro_batch_size = mb
                    if stage is not None:
                        candidate.zero_stage = stage
                try:  # measured parts only for a layout that fits (the fit does not use them)
                    job = resolve_job(candidate, conf_dir, measure=False)
                    fits = predict(job, efficiency=efficiency, recompute=recompute).fits
                    if fits is not False and left_unmeasured(job.hardware):
                        job = resolve_job(candidate, conf_dir)
                except ConfigError as exc:
                    refused[label] = str(exc)
                    continue
                if hardware is None:
                    hardware, tracking = job.hardware, job.tracking
                    warnings = batch_warnings(job, overrides)
                    title = (
                        f"distbench plan --search: model={job.model.name} "
                        f"world_size={job.world_size} hardware={hardware.name} "
                        f"precision={job.precision} seq_len={job.batch.seq_len} "
                        f"grad_accum={job.batch.grad_accum_steps}"
                    )
                p = predict(job, efficiency=efficiency, recompute=recompute)
                if p.fits is False:
                    refused[label] = (
                        f"does not fit: {p.mem_needed_bytes / GIB:.1f} of "
                        f"{p.device_mem_bytes / GIB:.1f} GiB per device"
                    )
                    continue
                ranked.append((label, p))
                keys[label] = run_key_tags(job)
                time_sources[label] = job.hardware.time_source
    ranked.sort(key=lambda item: -(item[1].tokens_per_s or 0.0))
    bars, note = strategy_error_bars(tracking, keys, time_sources) if history else ({}, "")
    return Search(ranked, refused, title, warnings, error_bars=bars, history=note)


def search_json(search: Search) -> dict[str, Any]:
    """`--search --json`: {ranked: [{layout, engine, ...prediction}], refused: {layout: why}}."""
    return {
        "ranked": [
            {
                "layout": label,
                **p.as_dict(),
                "pred_error": {k: b.as_dict() for k, b in search.error_bars.get(label, {}).items()},
            }
            for label, p in search.ranked
        ],
        "refused": search.refused,
        "warnings": search.warnings,
    }


def print_search(search: Search, top: int = 15) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 140 + (40 if search.error_bars else 0)))
    table = Table(title=search.title)
    for header in ("#", "layout", "total GiB", "step s", "tokens/s", "comm GB/step", "$/1M tok"):
        table.add_column(header, justify="left" if header == "layout" else "right")
    for i, (label, p) in enumerate(search.ranked[:top], 1):
        bars = search.error_bars.get(label, {})
        table.add_row(
            str(i),
            label,
            with_error(f"{p.mem.total / GIB:.2f}", bars.get("mem")),
            with_error(_fmt(p.step_time_s, "{:.3g}"), bars.get("time")),
            _fmt(p.tokens_per_s, "{:,.0f}"),
            f"{p.comm_bytes_per_step / 1e9:.3g}",
            _fmt(p.cost_usd_per_1m_tokens, "{:.4g}"),
        )
    console.print(table)
    console.print(
        f"{len(search.ranked)} layouts fit ({min(top, len(search.ranked))} shown), "
        f"{len(search.refused)} refused:",
        highlight=False,
    )
    by_reason: dict[str, list[str]] = {}
    too_big: dict[str, list[float]] = {}
    for label, why in search.refused.items():
        if why.startswith("does not fit: "):
            head = label.rpartition(" mb")[0]
            too_big.setdefault(head, []).append(float(why.split()[3]))
        else:
            by_reason.setdefault(why, []).append(label)
    if too_big:
        memory = (
            f"{head} ({min(v):.0f}-{max(v):.0f} GiB)" if len(v) > 1 else f"{head} ({v[0]:.0f} GiB)"
            for head, v in too_big.items()
        )
        console.print(f"  does not fit in device memory: {'; '.join(memory)}", highlight=False)
    for why, labels in by_reason.items():
        console.print(f"  {why}: {'; '.join(_collapse_micro_batches(labels))}", highlight=False)
    if search.history:
        console.print(search.history, highlight=False)
    for warning in search.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)


def _collapse_micro_batches(labels: list[str]) -> list[str]:
    """`x mb1`, `x mb2`, ... refused for one reason → `x mb1,2,...` (order kept)."""
    groups: dict[str, list[str]] = {}
    for label in labels:
        head, _, mb = label.partition(" mb")
        groups.setdefault(head, []).append(mb)
    return [f"{head} mb{','.join(mbs)}" for head, mbs in groups.items()]
