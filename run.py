"""distbench's entry point: compose the config (Hydra) → resolve the Job → launch the ranks → track.

python run.py                                        # tiny model, dp, 2 ranks (CPU: ~20 s)
python run.py -m strategy=dp,tp,zero3 world_size=2,4 # a sweep: one MLflow child run per job
python run.py -m experiments=strategy_grid           # a named study from experiments/
python run.py --help                                 # commands, config groups, the config

`main()` returns the job's `objective` metric (default throughput_tokens_per_s), so that a Hydra
sweeper plugin that searches (Optuna, Nevergrad, Ax) can drive run.py; the basic sweeper
ignores it.
"""

from __future__ import annotations

import math
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from distbench.compose.schema import register_configs

PROJECT_DIR = Path(__file__).resolve().parent
os.environ.setdefault("DISTBENCH_HOME", str(PROJECT_DIR))  # conf/config.yaml's searchpath
register_configs()

# Groups `--help` does not offer: Hydra's own, the schema nodes (schema/<group>, what each
# option extends) and ds_zero (the plain key zero_stage picks its file).
HIDDEN_GROUPS = ("hydra", "schema", "ds_zero")
HELP_WIDTH = 100

# What a job without its objective metric returns (FAILED, refused, or the metric absent):
# the worst value for the metric's direction. Higher is better (throughput, TFLOP/s, MFU,
# bandwidth): 0.0. Lower is better (step time, latency, memory, cost, loss, error): 1e9, large
# but finite: samplers fit models to the values and inf has broken some (optuna/optuna#5374
# MOTPE, #5995 GPSampler); no real step time, GiB or USD per 1M tokens comes near it.
WORST_HIGHER_IS_BETTER = 0.0
WORST_LOWER_IS_BETTER = 1e9
# For a metric no workload declares (distbench.workloads.metric_catalog), its name decides: a
# rate (…_per_s) or any of HIGHER_WORDS (split on _ and .) means higher is better, else any of
# LOWER_WORDS lower (bytes per step, GiB per rank, USD per 1M tokens), else higher.
HIGHER_WORDS = frozenset({"throughput", "tflops", "mfu", "gbps", "algbw", "busbw"})
LOWER_WORDS = frozenset(
    {"s", "time", "latency", "mem", "gib", "bytes", "cost", "loss", "err", "alpha"}
)


def objective_goal(metric: str) -> str:
    """ "max" when higher is better for `metric`, else "min" (its MetricSpec's goal, else its
    name)."""
    from distbench.workloads import metric_catalog

    declared = metric_catalog().get(metric)
    if declared is not None:
        return declared.goal
    name = metric.lower()
    words = set(re.split(r"[_.]", name))
    if name.endswith("_per_s") or words & HIGHER_WORDS or not words & LOWER_WORDS:
        return "max"
    return "min"


def worst_value(metric: str) -> float:
    return WORST_HIGHER_IS_BETTER if objective_goal(metric) == "max" else WORST_LOWER_IS_BETTER


def objective_value(outcome: dict[str, Any], metric: str, warn: bool = True) -> float:
    """The value main() returns for a job's outcome: its `metric` when the job measured it (a
    FINISHED job, or one skipped under resume=true whose earlier run FINISHED), else the worst
    value for the metric's direction (worst_value). `warn`: say when a measured job lacks it."""
    measured = outcome.get("status") == "FINISHED" or (
        outcome.get("status") == "SKIPPED" and outcome.get("previous_status") == "FINISHED"
    )
    value = (outcome.get("metrics") or {}).get(metric)
    if measured and isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    if measured and warn:  # a typo in objective= would make every job look failed: say so
        known = ", ".join(sorted(outcome.get("metrics") or {})) or "none"
        print(f"distbench: objective={metric} is not a metric of this job (it has: {known})")
    return worst_value(metric)


def help_groups() -> str:
    """`--help`'s config groups and their options, the current choice in [ ] (HIDDEN_GROUPS
    left out; experiments/ added: it is on the searchpath, which Hydra's listing does not see)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    loader = GlobalHydra.instance().config_loader()
    choices = dict(HydraConfig.get().runtime.choices) if HydraConfig.initialized() else {}
    groups = {
        group: set(loader.get_group_options(group))
        for group in loader.list_groups("")
        if group not in HIDDEN_GROUPS
    }
    studies = Path(os.environ["DISTBENCH_HOME"]) / "experiments"
    groups.setdefault("experiments", set()).update(p.stem for p in studies.glob("*.yaml"))
    width = max(map(len, groups)) + 2
    lines = []
    for group in sorted(groups):
        options = [f"[{o}]" if choices.get(group) == o else o for o in sorted(groups[group])]
        lines += textwrap.wrap(
            ", ".join(options),
            HELP_WIDTH,
            initial_indent=f"{group + ':':<{width}}",
            subsequent_indent=" " * width,
            break_on_hyphens=False,
        )
    return "\n".join(lines)


OmegaConf.register_new_resolver("distbench.help_groups", help_groups, replace=True)


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    """Run one job; return its `objective` metric (objective_value) for a sweeper plugin."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from distbench.launch.progress import own_lines_to_log
    from distbench.orchestrator import JobCancelled, install_sigterm_handler, precheck, run_job
    from distbench.orchestrator.signals import exit_code
    from distbench.tools.summary import print_summary
    from distbench.tracking.sweep import trial_budget

    single_run = HydraConfig.get().mode == RunMode.RUN
    if single_run:
        refusal = precheck(cfg, PROJECT_DIR / "conf")
        if refusal:  # refuse before anything starts: one line, no traceback
            print(f"distbench: invalid config: {refusal}", file=sys.stderr)
            sys.exit(2)
    install_sigterm_handler()
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        with own_lines_to_log():  # the orchestrator's "distbench: ..." lines in run.log too
            outcome = run_job(cfg, job_dir, PROJECT_DIR / "conf", PROJECT_DIR)
    except (KeyboardInterrupt, JobCancelled) as exc:  # recorded as cancelled: stop, no traceback
        print(f"distbench: stopped ({str(exc) or 'Ctrl-C'}); the sweep's parent run is closed")
        sys.exit(exit_code(exc))  # 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP
    if single_run:
        print_summary([outcome], title=f"distbench run {job_dir}")
        if outcome["status"] == "FAILED":
            sys.exit(1)
    # Only a sampling sweeper (Optuna) reads the value: a grid or a single run stays quiet.
    sampled = trial_budget(HydraConfig.get()) is not None
    return objective_value(outcome, cfg.objective, warn=sampled)


# Hydra's own modes that run no job: their arguments are Hydra's, not config overrides
# (`-sc install=bash` installs shell completion, `-sc query=bash` answers it), so run.py's
# up-front refusal of bad overrides lets them through.
HYDRA_OWN_FLAGS = ("-sc", "--shell-completion", "-i", "--info", "--hydra-help")


def hydra_own_mode(argv: list[str]) -> bool:
    """Whether the command line asks Hydra for completion, --info or --hydra-help."""
    return any(arg in HYDRA_OWN_FLAGS or arg.startswith("--info=") for arg in argv)


if __name__ == "__main__":
    from distbench.compose.overrides import refuse_overrides

    argv = sys.argv[1:]
    refused = None if hydra_own_mode(argv) else refuse_overrides(argv, PROJECT_DIR / "conf")
    if refused:  # Hydra would print several lines (and, in a sweep, abort it): one line
        print(f"distbench: invalid config: {refused}", file=sys.stderr)
        sys.exit(2)
    main()
