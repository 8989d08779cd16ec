"""`distbench compare`: flag the configurations of a candidate sweep slower or hungrier than in
a baseline sweep (tools/compare.py); exit 1 on a regression, 0 when none (also when one run a
side cannot judge a change: it says so and how to get samples, repeats=N).

    distbench compare --baseline <parent run id> --candidate latest
    distbench compare --baseline previous   # the newest sweep against the one started before it
"""

from __future__ import annotations

import argparse
import sys

from distbench.cli.options import add_store_options, store_uri


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "compare", help="flag configurations of a sweep slower or hungrier than a baseline sweep"
    )
    parser.add_argument(
        "--baseline",
        required=True,
        help="'previous' (the sweep started just before the candidate), a sweep's parent run id "
        "or run name, or its dir (multirun/DAY/TIME)",
    )
    parser.add_argument(
        "--candidate",
        default="latest",
        help="'latest' (default), a sweep's parent run id or run name, or its dir",
    )
    parser.add_argument(
        "--threshold-pct",
        type=float,
        default=5.0,
        help="how much worse (%%) a metric may get before it is a regression (default 5)",
    )
    parser.add_argument(
        "--single-run-noise-pct",
        type=float,
        default=40.0,
        help="with one run a side, a timing change within this (%%) is 'cannot judge', not a "
        "regression (default 40: the worst seen between identical single runs on a 2-core host; "
        "repeats=N measures the noise instead)",
    )
    parser.add_argument(
        "--metrics",
        default="throughput_tokens_per_s,peak_mem_gib",
        help="comma-separated (default throughput_tokens_per_s,peak_mem_gib)",
    )
    add_store_options(
        parser,
        experiment_help="where latest, previous and names are looked up (default distbench)",
    )
    parser.add_argument("--no-log", action="store_true", help="do not log the comparison to MLflow")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Exit 0 when no configuration regressed, 1 when one did, 2 (one line) for sweeps that
    cannot be compared."""
    from distbench.tools import compare, compare_log

    uri = store_uri(args)
    try:
        metrics = compare.parse_metrics(args.metrics)
        threshold_pct = compare.check_threshold(args.threshold_pct)
        single_run_pct = compare.check_threshold(
            args.single_run_noise_pct, "--single-run-noise-pct"
        )
        candidate, cand_runs = compare.load_sweep(uri, args.candidate, args.experiment)
        baseline, base_runs = compare.load_sweep(  # "previous": the one before the candidate
            uri, args.baseline, args.experiment, candidate.parent_run_id
        )
        if baseline.parent_run_id == candidate.parent_run_id:
            raise ValueError(
                f"--candidate {args.candidate} is the baseline sweep {baseline.parent_run_id}; "
                "compare two different sweeps"
            )
        rows = compare.compare_sweeps(base_runs, cand_runs, metrics, threshold_pct, single_run_pct)
        if not compare.compared_configs(rows):
            raise ValueError(
                f"no configuration (distbench.signature) of sweep {candidate.parent_run_id} "
                f"ran in the baseline {baseline.parent_run_id}"
            )
    except (LookupError, ValueError) as exc:
        print(f"distbench: compare: {exc}", file=sys.stderr)
        return 2
    compare.print_table(rows, f"candidate {candidate.title} vs baseline {baseline.title}")
    print(compare.summary_line(rows, threshold_pct))
    if not args.no_log:
        run_id = compare_log.log_comparison(
            uri,
            candidate.experiment_id,
            baseline.parent_run_id,
            candidate.parent_run_id,
            rows,
            metrics,
            threshold_pct,
            single_run_pct,
        )
        print(f"distbench: compare: logged as run {run_id} (tag distbench.kind=compare)")
    return 1 if compare.regressed_configs(rows) else 0
