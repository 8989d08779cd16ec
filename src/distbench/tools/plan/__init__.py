"""`distbench plan`: every strategy's predicted memory, communication, step time and cost for one
model on one cluster shape, and the recommended strategy, before anything runs.

The config is composed exactly as run.py composes it (same conf/, same overrides), resolved
into a Job per strategy (refused ones are listed with their one-line reason), and predicted
with figures.predict. No process group is started and nothing is allocated.

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
fit by tokens/s and counts the rest by reason (`--verbose` lists them; `--json`: {ranked,
refused, warnings}); a progress bar on stderr while it runs, the best row's `python run.py ...`
command after it.

Every table shows each row's layout (`dp×tp×pp`) and tokens per step; when they differ, a line
says that tokens/s then compares different global batches, and `batch.global_batch_tokens=N`
plans every row at one. The memory a fit compares is shown against the device with its margin
(`need / dev GiB`, `free GiB`). fp32 planned on a GPU is warned about (GPUs train in bf16), and
offload's host RAM is per node (DeepSpeed's ZeRO-2 estimator is the whole job's).

The package: strategies.py (make_plan: each strategy's row and the recommendation), search.py
(search_layouts: every layout ranked), inputs.py (the overrides, strategies, tags and warnings a
plan starts from), store.py (measured links and error bars from the tracking store), sources.py
(where each figure came from), render.py (the tables and the JSON), advice.py (the run.py
command of a row, refusals by reason, the global-batch note).
"""

from distbench.tools.plan.advice import refusal_counts, run_command
from distbench.tools.plan.inputs import (
    batch_warnings,
    dtype_warnings,
    efficiency_model,
    plan_warnings,
    project_dir,
    run_key_tags,
    strategy_options,
)
from distbench.tools.plan.render import (
    plan_json,
    plan_table,
    print_plan,
    print_search,
    search_json,
    search_table,
)
from distbench.tools.plan.search import SEARCH_BASES, Search, search_layouts
from distbench.tools.plan.sources import figure_sources
from distbench.tools.plan.store import open_store, stored_link_fits, strategy_error_bars
from distbench.tools.plan.strategies import Plan, make_plan

__all__ = [
    "SEARCH_BASES",
    "Plan",
    "Search",
    "batch_warnings",
    "dtype_warnings",
    "efficiency_model",
    "figure_sources",
    "make_plan",
    "open_store",
    "plan_json",
    "plan_table",
    "plan_warnings",
    "print_plan",
    "print_search",
    "project_dir",
    "refusal_counts",
    "run_command",
    "run_key_tags",
    "search_json",
    "search_layouts",
    "search_table",
    "stored_link_fits",
    "strategy_error_bars",
    "strategy_options",
]
