"""The report's loader: which runs a sweep names (its parent run id or name, a sweep dir,
"latest", "previous") and those MLflow runs as one flat DataFrame (`flat_table`: one row per
run, its tags and every metric by its bare name). The only module of the report that reads MLflow.

    python -c "from distbench.tools.report.load import *; \
        print(flat_table(load_runs('sqlite:///mlflow.db', 'latest').runs))"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from distbench.figures.fair import layout_of, layout_of_params, tokens_of_params, tokens_per_step_of
from distbench.tracking.mlflow_store import RUN_ID
from distbench.tracking.signature import RESUMED_INTO_TAG_PREFIX
from distbench.workloads import counts_batch_tokens, registry

# Tags copied into the flat table as columns (when a run has them), besides every `hw.*` tag and
# the workloads' own (WorkloadSpec.tag_keys; tag_columns()).
TAG_COLUMNS = (
    "strategy",
    "world_size",
    "zero_stage",
    "workload",
    "model",
    "batch",
    "dtype",
    "precision",
    "hardware",
    "backend",
    "failure_kind",
    "failure_reason",
    "mfu_error",
    "oversubscribed",  # orchestrator/host_watch.py: the run's figures came from shared cores
)
ID_COLUMNS = ("run_id", "run_name", "status", "start_time", "parent_run_id")


def tag_columns() -> frozenset[str]:
    """TAG_COLUMNS and every registered workload's tag_keys (a plug-in's too)."""
    return frozenset(TAG_COLUMNS).union(*(s.tag_keys for s in registry().values()))


SWEEP_FORMS = (
    "'latest', 'previous' (the sweep started just before the candidate, or before the latest), "
    "a sweep's parent run id or run name, or a sweep dir (multirun/DAY/TIME)"
)


@dataclass
class Selection:
    """What `load_runs` selected: the runs, the sweep's parent (None for a whole experiment)."""

    runs: list[Any]
    parent_run_id: str | None
    experiment_id: str
    title: str
    sweep_dir: str | None = None  # the parent's distbench.sweep_dir tag: where its files are
    history: list[Any] = field(default_factory=list)  # every job's run of the experiment
    swept: list[str] = field(default_factory=list)  # the keys the sweep varies: parent's params


@dataclass(frozen=True)
class Sweeps:
    """An experiment's runs sorted into sweeps: each run's parent, the sweeps a resumed run
    also belongs to (tag resumed_into.<id>), and the sweeps' parent runs (top-level runs that
    own children), oldest first."""

    parent_of: dict[str, str | None]
    resumed_into: dict[str, set[str]]
    owners: set[str]  # every run that owns another: the parents, nested ones too
    parents: list[Any]

    def children(self, runs: list[Any], parent_run_id: str) -> list[Any]:
        return [
            r
            for r in runs
            if self.parent_of.get(r.info.run_id) == parent_run_id
            or parent_run_id in self.resumed_into.get(r.info.run_id, ())
        ]


def _all_runs(client: Any, experiment_id: str) -> list[Any]:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _started(run: Any) -> tuple[int, str]:
    return run.info.start_time or 0, run.info.run_id


def index_sweeps(runs: list[Any]) -> Sweeps:
    """Which runs are sweeps' parents and whose runs each owns (a resumed sweep's parent also
    owns the earlier runs it skipped)."""
    parent_of = {r.info.run_id: r.data.tags.get("mlflow.parentRunId") for r in runs}
    resumed_into = {
        r.info.run_id: {k[len(RESUMED_INTO_TAG_PREFIX) :] for k in r.data.tags}
        for r in runs
        if any(k.startswith(RESUMED_INTO_TAG_PREFIX) for k in r.data.tags)
    }
    owners = {p for p in parent_of.values() if p} | set().union(*resumed_into.values())
    parents = [r for r in runs if r.info.run_id in owners and not parent_of[r.info.run_id]]
    return Sweeps(parent_of, resumed_into, owners, sorted(parents, key=_started))


def read_sweep_dir(path: Path) -> tuple[set[str], str | None]:
    """What a sweep dir records of its sweep, from its jobs' spooled runs (JOB/mlflow_run.json):
    the parent run ids they name, and their experiment's name (None when none says)."""
    import json

    from distbench.tracking.spool import PAYLOAD

    ids: set[str] = set()
    experiment = None
    for payload_path in sorted(path.glob(f"*/{PAYLOAD}")):
        try:
            payload = json.loads(payload_path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue  # a truncated spool names nothing; `distbench sync` reports it
        if isinstance(payload, dict):
            ids |= {payload["parent_run_id"]} if payload.get("parent_run_id") else set()
            experiment = experiment or payload.get("experiment_name")
    return ids, experiment


def pick_sweep(
    parents: list[Any],
    sweep: str,
    experiment: str,
    anchor: str | None = None,
    sweep_dir: str | None = None,
    recorded: set[str] | frozenset[str] = frozenset(),
) -> str:
    """The parent run id that `sweep` names among an experiment's sweep parents (oldest
    first): "latest" the newest; "previous" the one started just before `anchor` (default: the
    newest); with `sweep_dir` (a resolved path) the newest whose distbench.sweep_dir tag is it,
    else the newest of the ids the dir's spooled runs `recorded`; else the one with that run
    name. LookupError, one line naming the value and what is allowed, otherwise."""
    from distbench.tracking.spool import SWEEP_DIR_TAG

    where = f"in experiment {experiment!r}"
    if not parents:
        raise LookupError(f"no sweep (a parent run with children) {where}")
    if sweep == "latest":
        return parents[-1].info.run_id
    if sweep == "previous":
        anchor = anchor or parents[-1].info.run_id
        ids = [r.info.run_id for r in parents]
        if anchor not in ids:
            raise LookupError(f"run {anchor} is not a sweep's parent run {where}")
        if ids.index(anchor) == 0:
            raise LookupError(f"no sweep started before sweep {anchor} {where}")
        return ids[ids.index(anchor) - 1]
    if sweep_dir is not None:
        tagged = [r for r in parents if r.data.tags.get(SWEEP_DIR_TAG) == sweep_dir]
        tagged = tagged or [r for r in parents if r.info.run_id in recorded]
        if not tagged:
            raise LookupError(
                f"no sweep of {sweep_dir} {where} (no parent run tagged {SWEEP_DIR_TAG} with "
                "it, nor named by its spooled runs); upload it with: distbench sync DIR"
            )
        return tagged[-1].info.run_id
    named = [r.info.run_id for r in parents if r.info.run_name == sweep]
    if len(named) > 1:
        raise LookupError(
            f"{len(named)} sweeps {where} are named {sweep!r} ({', '.join(named)}); give a run id"
        )
    if not named:
        raise LookupError(f"no sweep {sweep!r} {where}; give {SWEEP_FORMS}")
    return named[0]


def sweep_path(sweep: str | None) -> Path | None:
    """The sweep dir that `sweep` names, resolved, or None when it names no directory.
    LookupError when it looks like a path (has a '/') but no such directory exists."""
    if not sweep or sweep in ("latest", "previous") or RUN_ID.match(sweep):
        return None
    path = Path(sweep).expanduser()
    if path.is_dir():
        return path.resolve()
    if "/" in sweep:
        raise LookupError(f"no such sweep dir {sweep!r}; give {SWEEP_FORMS}")
    return None


def require_store(tracking_uri: str) -> None:
    """LookupError (one line) for a sqlite URI whose file does not exist: reading it would
    create an empty store (and its folder) where a path was mistyped."""
    from distbench.tracking.mlflow_store import sqlite_path

    db = sqlite_path(tracking_uri)
    if db is not None and not db.is_file():
        where = "no such file" if db.parent.is_dir() else f"no folder {db.parent}"
        raise LookupError(f"no MLflow store at {tracking_uri} ({where}); check the path")


def load_runs(
    tracking_uri: str, sweep: str | None, experiment: str = "distbench", anchor: str | None = None
) -> Selection:
    """The child runs of the sweep that `sweep` names (see SWEEP_FORMS and pick_sweep; a run id
    may be in any experiment, the other forms are looked up in `experiment`, or in the one a
    sweep dir's runs name, or in `anchor`'s for "previous"), or every non-parent run of the
    experiment when `sweep` is None. Raises LookupError with a one-line reason when nothing
    matches."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from distbench.tracking.spool import SWEEP_DIR_TAG

    require_store(tracking_uri)
    client = MlflowClient(tracking_uri)
    path = sweep_path(sweep)
    recorded, named_in_dir = read_sweep_dir(path) if path else (set(), None)
    experiment = named_in_dir or experiment
    by_id = sweep if sweep and RUN_ID.match(sweep) else (anchor if sweep == "previous" else None)
    if by_id:
        try:
            experiment_id = client.get_run(by_id).info.experiment_id
        except MlflowException as exc:
            raise LookupError(f"no run {by_id!r} in {tracking_uri}") from exc
        experiment = client.get_experiment(experiment_id).name
    else:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise LookupError(f"no experiment {experiment!r} in {tracking_uri}")
        experiment_id = found.experiment_id
    runs = _all_runs(client, experiment_id)
    sweeps = index_sweeps(runs)
    jobs = [  # every job's run; `distbench compare` runs are not jobs
        r
        for r in runs
        if r.info.run_id not in sweeps.owners and r.data.tags.get("distbench.kind") != "compare"
    ]
    if sweep is None:
        return Selection(jobs, None, experiment_id, f"experiment {experiment}", history=jobs)
    if RUN_ID.match(sweep):
        parent_run_id = sweep
    else:
        where = str(path) if path else None
        parent_run_id = pick_sweep(sweeps.parents, sweep, experiment, anchor, where, recorded)
    parent = client.get_run(parent_run_id)
    children = sweeps.children(runs, parent_run_id)
    if not children:
        raise LookupError(f"run {parent_run_id} has no child runs: not a sweep's parent run")
    title = f"sweep {parent.info.run_name} ({parent_run_id})"
    return Selection(
        children,
        parent_run_id,
        experiment_id,
        title,
        parent.data.tags.get(SWEEP_DIR_TAG),
        jobs,
        swept=list(parent.data.params),
    )


def flat_table(runs: list[Any], swept: Sequence[str] = ()) -> pd.DataFrame:
    """MLflow runs → one row per run: ID_COLUMNS, tag_columns(), `hw.*` tags, bare metrics, its
    `layout` (dp×tp×pp) and `tokens_per_step` (from its params where it logged no metric), and
    its value of each `swept` key (the sweep's varied keys; listed in `df.attrs["swept"]`).
    `world_size` becomes a number (NaN when absent); columns nobody has are absent."""
    rows = []
    columns = tag_columns()
    for run in runs:
        tags, params = run.data.tags, run.data.params
        row = {
            "run_id": run.info.run_id,
            "run_name": run.info.run_name,
            "status": run.info.status,
            "start_time": pd.to_datetime(run.info.start_time, unit="ms"),
            "parent_run_id": tags.get("mlflow.parentRunId"),
        }
        row.update({k: v for k, v in tags.items() if k in columns or k.startswith("hw.")})
        row.update(run.data.metrics)
        layout = layout_of({"layout": layout_of_params(params), **tags})
        if layout:
            row["layout"] = layout
        tokens = tokens_per_step_of(run.data.metrics) or tokens_of_params(
            params, counts_batch_tokens(params.get("workload.name"))
        )
        if tokens:
            row["tokens_per_step"] = tokens
        for key in swept:
            row.setdefault(key, params.get(key, params.get(f"{key}.name", tags.get(key))))
        rows.append(row)
    df = pd.DataFrame(rows)
    if "world_size" in df:
        df["world_size"] = pd.to_numeric(df["world_size"], errors="coerce")
    if len(df):
        df = df.sort_values([c for c in ("strategy", "world_size", "run_name") if c in df])
    df = df.reset_index(drop=True)
    df.attrs["swept"] = [k for k in swept if k in df]
    return df
