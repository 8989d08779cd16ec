"""distbench's entry point: compose the config (Hydra) → resolve the Job → launch the ranks → track.

python run.py                                        # tiny model, dp, 2 ranks (CPU: ~20 s)
python run.py -m strategy=dp,tp,zero3 world_size=2,4 # a sweep: one MLflow child run per job
python run.py -m experiments=strategy_grid           # a named study from experiments/
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from distbench.compose.schema import register_configs

PROJECT_DIR = Path(__file__).resolve().parent
os.environ.setdefault("DISTBENCH_HOME", str(PROJECT_DIR))  # conf/config.yaml's searchpath
register_configs()


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from distbench.orchestrator import JobCancelled, install_sigterm_handler, precheck, run_job
    from distbench.tools.summary import print_summary

    single_run = HydraConfig.get().mode == RunMode.RUN
    if single_run:
        refusal = precheck(cfg, PROJECT_DIR / "conf")
        if refusal:  # refuse before anything starts: one line, no traceback
            print(f"distbench: invalid config: {refusal}", file=sys.stderr)
            sys.exit(2)
    install_sigterm_handler()
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        outcome = run_job(cfg, job_dir, PROJECT_DIR / "conf", PROJECT_DIR)
    except (KeyboardInterrupt, JobCancelled) as exc:  # recorded as cancelled: stop, no traceback
        print(f"distbench: stopped ({exc or 'Ctrl-C'}); the sweep's parent run is closed")
        sys.exit(130 if isinstance(exc, KeyboardInterrupt) else 143)
    if single_run:
        print_summary([outcome], title=f"distbench run {job_dir}")
        if outcome["status"] == "FAILED":
            sys.exit(1)


if __name__ == "__main__":
    main()
