"""`distbench plan`: every strategy's predicted memory, communication, step time and cost for one
model on one cluster shape, and the recommended strategy, before anything runs.

The config is composed exactly as run.py composes it (same conf/, same overrides), resolved
into a Job per strategy (refused ones are listed with their one-line reason), and predicted
with analytic.predict. No process group is started and nothing is allocated.

    distbench plan model=llama3_8b world_size=8 hardware=h100_sxm
    distbench plan model=llama3_70b world_size=64 hardware=h100_sxm workload.dtype=bf16 --json
    distbench plan --strategies dp,zero3 hardware=auto

`--json` prints one JSON list: one object per validated strategy (`strategy`, `world_size`,
`dp`, `tp`, `pp`, `zero_stage`, `num_params`, `mem_bytes` {params, grads, optimizer,
activations, host, total} per device, `fits`, `comm_bytes_per_step`, `step_time_s`,
`tokens_per_s`, `cost_usd_per_1m_tokens`, `recommended`, ...), then one final object with
`recommendation` (a strategy name, or null when nothing fits), `reason`, `refused`
{strategy: reason} and the resolved `hardware`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distbench.compose.schema import HardwareConfig
from distbench.figures.analytic import PREFERENCE, Prediction, predict, recommend
from distbench.figures.metrics import GIB


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
) -> Plan:
    """Compose, resolve and predict every strategy; recommend one."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from distbench.compose.schema import ConfigError, register_configs
    from distbench.job import resolve_job

    home = project_dir()
    conf_dir = home / "conf"
    os.environ.setdefault("DISTBENCH_HOME", str(home))  # conf/config.yaml's searchpath
    register_configs()
    overrides, from_overrides = _split_strategy_override(list(overrides))
    names = strategies or from_overrides or strategy_options(conf_dir)

    predictions, refused = [], {}
    hardware: HardwareConfig | None = None
    title, dtype = "", "fp32"
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
                hardware = job.hardware
                if hardware.device == "cpu" and hardware.mem_gib is None:
                    host = _host_mem_gib()  # ranks on one host share its memory
                    nproc = job.topology.ranks_per_node
                    mem_gib = None if host is None else host / nproc
                    hardware = dataclasses.replace(hardware, mem_gib=mem_gib)
                dtype = job.dtype
                batch = job.batch
                title = (
                    f"distbench plan: model={job.model.name} "
                    f"world_size={job.world_size} hardware={hardware.name} "
                    f"dtype={dtype} batch={batch.name} "
                    f"(micro_batch {batch.micro_batch_size} × "
                    f"{batch.grad_accum_steps} × seq {batch.seq_len})"
                )
            predictions.append(
                predict(
                    job.replace(hardware=hardware),
                    efficiency=efficiency,
                    bandwidth_gbps=bandwidth_gbps,
                    latency_s=latency_s,
                    recompute=recompute,
                )
            )
    best, reason = recommend(predictions)
    return Plan(
        predictions=predictions,
        refused=refused,
        recommendation=best,
        reason=reason,
        hardware=_hardware_dict(hardware),
        title=title or "distbench plan",
        dtype=dtype,
    )


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
        {**p.as_dict(), "recommended": p.strategy == plan.recommendation} for p in plan.predictions
    ]
    rows.append(
        {
            "recommendation": plan.recommendation,
            "reason": plan.reason,
            "refused": plan.refused,
            "hardware": plan.hardware,
        }
    )
    return rows


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def plan_table(plan: Plan) -> Any:
    from rich.table import Table

    table = Table(title=plan.title)
    headers = (
        "strategy",
        "dp×tp×pp z",
        "params",
        "grads",
        "optim",
        "activ",
        "total GiB",
        "fits",
        "comm GB/step",
        "step s",
        "tokens/s",
        "$/1M tok",
    )
    for header in headers:
        table.add_column(header, justify="left" if header == "strategy" else "right")
    for p in plan.predictions:
        mem = p.mem
        fits = {True: "[green]yes[/green]", False: "[red]no[/red]", None: "?"}[p.fits]
        name = f"[bold]{p.strategy} ★[/bold]" if p.strategy == plan.recommendation else p.strategy
        layout = p.layout
        table.add_row(
            name,
            f"{layout.dp}×{layout.tp}×{layout.pp} z{layout.zero_stage}",
            *(f"{v / GIB:.2f}" for v in (mem.params, mem.grads, mem.optimizer, mem.activations)),
            f"{mem.total / GIB:.2f}",
            fits,
            f"{p.comm_bytes_per_step / 1e9:.3g}",
            _fmt(p.step_time_s, "{:.3g}"),
            _fmt(p.tokens_per_s, "{:,.0f}"),
            _fmt(p.cost_usd_per_1m_tokens, "{:.4g}"),
        )
    return table


def print_plan(plan: Plan) -> None:
    from rich.console import Console

    console = Console(width=max(Console().width, 140))
    console.print(plan_table(plan))
    hw = plan.hardware
    if plan.predictions:
        a = plan.predictions[0].assumptions
        console.print(
            f"per device: {hw.get('mem_gib') or 0:.1f} GiB, "
            f"peak {hw.get(f'peak_tflops_{plan.dtype}') or 0:.3g} TFLOP/s {plan.dtype}, "
            f"efficiency {a['efficiency']:.2f}, link {a['bandwidth_gbps']:g} GB/s, "
            f"latency {a['latency_s'] * 1e6:g} µs per collective, "
            f"activations {'recomputed' if a['recompute'] else 'stored'}; memory excludes "
            + (
                "the ~0.5 GiB runtime of each process"
                if hw.get("device") == "cpu"
                else "DeepSpeed's buffers and the CUDA context"
            ),
            highlight=False,
        )
    for name, why in plan.refused.items():
        console.print(f"refused {name}: {why}", highlight=False)
    console.print(f"recommendation: {plan.reason}", highlight=False)
