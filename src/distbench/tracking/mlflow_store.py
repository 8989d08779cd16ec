"""Writing to an MLflow store safely: one lock around creating it, retries with backoff where
sqlite is busy or a server blips, batched logging, and the child-run writer.

Four processes creating a fresh sqlite store at once corrupt it (alembic migrations race), so
creation is serialised with a file lock next to the database; afterwards concurrent writers are
fine but may meet "database is locked", which is retried. A sqlite store whose creation fails
midway (a full disk) would stay half-migrated and unusable ("table _alembic_tmp_runs already
exists"): the file this call created is removed and the error is one line (StoreNotCreated),
without MLflow's SQL.

The MLflow client brings ~2,200 modules (pandas, SQLAlchemy, alembic); the interpreter's final
garbage collection over them costs about a second at the end of every `python run.py` on a
small CPU (benchmarks/README.md, "Measuring the measurer"). `client()` therefore freezes the
collector at exit.

    python -c "from distbench.tracking.mlflow_store import ensure_experiment as e; print(e('sqlite:///x.db','t'))"
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import os
import re
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from distbench.files import file_lock
from distbench.tracking.live import now_ms

RUN_ID = re.compile(r"^[0-9a-f]{32}$")  # MLflow's run ids: uuid4 hex

T = TypeVar("T")
MAX_PARAMS_PER_BATCH = 100  # MLflow's log_batch limits
MAX_METRICS_PER_BATCH = 1000
RETRY_DELAYS_S = (0.2, 0.5, 1.0, 2.0, 4.0, 8.0)
TRANSIENT = (
    "database is locked",
    "database is busy",
    "temporarily unavailable",
    "Max retries",
    "Connection refused",
    "Connection reset",
    "timed out",
    "503",
    "502",
)
# Errors that say the server is not there at all (not merely busy): one short probe decides.
UNREACHABLE = ("Max retries", "Connection refused", "Connection reset", "timed out")
PROBE_TIMEOUT_S = 3.0
DOWN_RECHECK_S = 60.0  # a store found down is not probed again for this long
# The schemes MLflow has a tracking store for (and a bare path, a file store).
KNOWN_SCHEMES = ("", "file", "sqlite", "http", "https", "postgresql", "mysql", "mssql")
KNOWN_SCHEMES += ("databricks", "databricks-uc", "uc")
QUOTES = re.compile(r"['\"\\\\]")
_down: dict[str, tuple[float, str]] = {}  # tracking uri -> (when it was found down, why)


class StoreUnavailable(ConnectionError):
    """The tracking server did not answer a short probe: callers spool instead of retrying."""


class StoreNotCreated(RuntimeError):
    """A new sqlite store could not be created (its half-made file removed): one line."""


def check_uri(tracking_uri: str) -> None:
    """ValueError (one line) for a URI no MLflow store understands, e.g. foo://bar."""
    scheme = urllib.parse.urlsplit(tracking_uri).scheme.split("+")[0].lower()
    if len(scheme) == 1:  # a Windows drive letter: a path
        scheme = ""
    if scheme not in KNOWN_SCHEMES:
        from distbench.tracking.secrets_mask import mask_text

        raise ValueError(
            f"unsupported tracking URI {mask_text(tracking_uri)!r}: use sqlite:///PATH, "
            "http(s)://HOST:PORT, postgresql://... or a directory"
        )


def probe(tracking_uri: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when a tracking server's host:port accepts a TCP connection within `timeout_s`
    (or the store is no server); else why not. One short probe instead of a minute of retries."""
    parts = urllib.parse.urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            return None
    except (OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


def mark_down(tracking_uri: str, why: str) -> None:
    _down[tracking_uri] = (time.monotonic(), why)


def check_reachable(tracking_uri: str) -> None:
    """Raise StoreUnavailable at once when the server is known down (found so less than
    DOWN_RECHECK_S ago) or does not answer a probe now."""
    from distbench.tracking.secrets_mask import mask_text

    if tracking_uri in _down:
        since, why = _down[tracking_uri]
        if time.monotonic() - since < DOWN_RECHECK_S:
            raise StoreUnavailable(f"tracking server {mask_text(tracking_uri)} is down ({why})")
        del _down[tracking_uri]
    why = probe(tracking_uri)
    if why is not None:
        mark_down(tracking_uri, why)
        raise StoreUnavailable(f"tracking server {mask_text(tracking_uri)} is down ({why})")


@functools.cache
def skip_final_collection() -> None:
    """At interpreter exit, freeze the garbage collector instead of letting it walk every object
    once more (the OS frees the memory). Registered once, when MLflow is first loaded: atexit
    handlers registered later (the sweep's parent-run close) still run before it, and the ones
    registered earlier (logging's flush) after it; only cyclic garbage goes unfinalized."""
    atexit.register(gc.freeze)


@functools.cache
def _probed(tracking_uri: str) -> bool:
    check_reachable(tracking_uri)  # raises (and is not cached) while the server is down
    return True


def client(tracking_uri: str) -> Any:
    """An MlflowClient that fails fast on an unreachable server instead of MLflow's default of
    minutes, so a job is spooled, not stuck: a server is probed once per process (a TCP
    connect, PROBE_TIMEOUT_S), one known down raises StoreUnavailable at once, and each HTTP
    call gets 2 quick retries and a 20 s timeout."""
    if tracking_uri in _down:
        check_reachable(tracking_uri)
    elif tracking_uri.startswith(("http://", "https://")):
        _probed(tracking_uri)
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    skip_final_collection()
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri)


def retry(
    call: Callable[[], T],
    delays_s: Iterable[float] = RETRY_DELAYS_S,
    tracking_uri: str | None = None,
) -> T:
    """`call()`, retried after each delay while it fails with a transient store error. With
    `tracking_uri`, a connection error is retried only while the server still answers a probe:
    a server that is gone is marked down (StoreUnavailable, no more waiting)."""
    for delay in (*delays_s, None):
        try:
            return call()
        except StoreUnavailable:
            raise
        except Exception as exc:
            if delay is None or not any(t in str(exc) for t in TRANSIENT):
                if tracking_uri and any(t in str(exc) for t in UNREACHABLE):
                    mark_down(tracking_uri, type(exc).__name__)
                raise
            if tracking_uri and any(t in str(exc) for t in UNREACHABLE):
                why = probe(tracking_uri)
                if why is not None:
                    mark_down(tracking_uri, why)
                    raise StoreUnavailable(
                        f"tracking server down ({why}) after {type(exc).__name__}"
                    ) from exc
            time.sleep(delay)
    raise AssertionError("unreachable")


def sqlite_path(tracking_uri: str) -> Path | None:
    return (
        Path(tracking_uri.removeprefix("sqlite:///"))
        if tracking_uri.startswith("sqlite:///")
        else None
    )


@contextlib.contextmanager
def store_lock(tracking_uri: str) -> Iterator[None]:
    """Hold an exclusive file lock next to a sqlite database (no-op for servers)."""
    db = sqlite_path(tracking_uri)
    if db is None:
        yield
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(f"{db}.lock"):
        yield


def _artifact_location(tracking_uri: str) -> str | None:
    """Keep an embedded store's artifacts next to its database, whatever the cwd of later runs."""
    db = sqlite_path(tracking_uri)
    return (db.parent / "mlartifacts").as_uri() if db else None


def ensure_experiment(tracking_uri: str, name: str) -> str:
    """The experiment's id, creating the store and the experiment on first use (serialised).
    A sqlite store this call creates and cannot finish is removed: StoreNotCreated."""
    uri = tracking_uri
    with store_lock(tracking_uri):
        db = sqlite_path(tracking_uri)
        new_store = db is not None and not db.exists()
        try:  # the client (or its first call) builds a new store: MLflow's migrations
            mlflow = client(tracking_uri)
            experiment = retry(lambda: mlflow.get_experiment_by_name(name), tracking_uri=uri)
        except Exception as exc:
            if not new_store or db is None:
                raise
            remove_unmade_store(tracking_uri, db)
            raise StoreNotCreated(
                f"could not create the MLflow store {db} ({first_line(exc)}); the half-made "
                "file was removed: the next run creates it afresh"
            ) from None
        if experiment is not None:
            return experiment.experiment_id
        return retry(
            lambda: mlflow.create_experiment(
                name, artifact_location=_artifact_location(tracking_uri)
            ),
            tracking_uri=uri,
        )


def first_line(exc: BaseException) -> str:
    """An exception's first line, without what SQLAlchemy appends ([SQL: ...], a link)."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def remove_unmade_store(tracking_uri: str, db: Path) -> None:
    """Remove a sqlite store (and its journals) whose creation failed, and MLflow's cached
    engine of it, so that the next attempt, in this process too, starts from nothing."""
    with contextlib.suppress(Exception):  # MLflow's engine cache (private: best effort)
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        engine = SqlAlchemyStore._engine_map.pop(tracking_uri, None)
        if engine is not None:
            engine.dispose()
    for path in (db, *(db.with_name(db.name + s) for s in ("-journal", "-wal", "-shm"))):
        with contextlib.suppress(OSError):
            path.unlink()


def ui_url(tracking_uri: str, experiment_id: str, ui_port: int) -> str:
    """The MLflow UI page listing an experiment's runs (the bare experiment URL opens traces),
    any password in a server's URI masked: it is printed."""
    from distbench.tracking.secrets_mask import mask_text

    base = (
        tracking_uri.rstrip("/")
        if tracking_uri.startswith(("http://", "https://"))
        else f"http://127.0.0.1:{ui_port}"
    )
    return mask_text(f"{base}/#/experiments/{experiment_id}/runs")


def flatten(tree: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts → {"a.b.c": "value"}; lists and None as their string form."""
    out: dict[str, str] = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    out[prefix.rstrip(".")] = str(tree)
    return out


def _chunks(items: list, size: int) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def tag_condition(key: str, value: str) -> str:
    """An MLflow filter clause `tags.key = value` for any value. MLflow's filter parser has no
    escape for a quote inside a quoted string: a value with a ' is quoted with ", and one with
    both (or a backslash) becomes a LIKE with _ for those characters (callers re-check)."""
    name = key.replace("`", "")
    if "\\" not in value and "'" not in value:
        return f"tags.`{name}` = '{value}'"
    if "\\" not in value and '"' not in value:
        return f'tags.`{name}` = "{value}"'
    pattern = re.sub(QUOTES, "_", value)
    return f"tags.`{name}` LIKE '{pattern}'"


def find_runs(tracking_uri: str, experiment_id: str, tags: dict[str, str]) -> list[Any]:
    """Runs of the experiment whose tags equal `tags` exactly, newest first."""
    condition = " and ".join(tag_condition(k, str(v)) for k, v in tags.items())
    mlflow = client(tracking_uri)
    runs = retry(
        lambda: mlflow.search_runs(
            [experiment_id], filter_string=condition, order_by=["attributes.start_time DESC"]
        ),
        tracking_uri=tracking_uri,
    )
    return [r for r in runs if all(r.data.tags.get(k) == str(v) for k, v in tags.items())]


def log_points(
    tracking_uri: str, run_id: str, points: Iterable[tuple[str, float, int, int]]
) -> None:
    """Log stepped metrics (name, value, step, timestamp in ms) to a run, in batches; exact
    repeats are ignored by the store, so a batch may be logged again."""
    from mlflow.entities import Metric

    mlflow = client(tracking_uri)
    metrics = [Metric(k, float(v), int(ts), int(step)) for k, v, step, ts in points]
    for chunk in _chunks(metrics, MAX_METRICS_PER_BATCH):
        retry(
            lambda chunk=chunk: mlflow.log_batch(run_id, metrics=chunk),
            tracking_uri=tracking_uri,
        )


def stamped_metrics(
    metrics: dict[str, float], series: Iterable[tuple[str, float, int]], end_ms: int
) -> list[tuple[str, float, int, int]]:
    """The final metrics at step 0 and unstamped series at their steps, as (name, value, step,
    ms), all at `end_ms`."""
    out = [(k, float(v), 0, end_ms) for k, v in sorted(metrics.items())]
    return out + [(k, float(v), step, end_ms) for k, v, step in series]


def fill_run(
    tracking_uri: str,
    run_id: str,
    params: dict[str, str],
    points: Iterable[tuple[str, float, int, int]],
    tags: dict[str, str],
    artifacts: list[Path],
    failed: bool,
    end_time_ms: int | None = None,
) -> None:
    """Log everything of a run and end it FINISHED (or FAILED) at `end_time_ms` (now when
    None). Each store call is retried while the store is busy; a repeat is harmless (same
    params, exact metric repeats ignored, artifacts overwritten)."""
    from mlflow.entities import Param, RunStatus, RunTag

    mlflow = client(tracking_uri)
    uri = tracking_uri
    param_list = [Param(k, v[:6000]) for k, v in sorted(params.items())]
    tag_list = [RunTag(k, v) for k, v in sorted(tags.items())]
    for chunk in _chunks(param_list, MAX_PARAMS_PER_BATCH):
        retry(lambda chunk=chunk: mlflow.log_batch(run_id, params=chunk), tracking_uri=uri)
    for chunk in _chunks(tag_list, MAX_PARAMS_PER_BATCH):
        retry(lambda chunk=chunk: mlflow.log_batch(run_id, tags=chunk), tracking_uri=uri)
    log_points(tracking_uri, run_id, points)
    for path in artifacts:
        if path.exists():
            retry(lambda path=path: mlflow.log_artifact(run_id, str(path)), tracking_uri=uri)
    status = RunStatus.to_string(RunStatus.FAILED if failed else RunStatus.FINISHED)
    retry(lambda: mlflow.set_terminated(run_id, status, end_time=end_time_ms), tracking_uri=uri)


def log_child_run(
    tracking_uri: str,
    experiment_id: str,
    run_name: str,
    params: dict[str, str],
    metrics: dict[str, float],
    tags: dict[str, str],
    artifacts: list[Path],
    failed: bool,
    parent_run_id: str | None = None,
    series: Iterable[tuple[str, float, int]] = (),
    points: Iterable[tuple[str, float, int, int]] = (),
    start_time_ms: int | None = None,
    end_time_ms: int | None = None,
) -> str:
    """Create one finished (or FAILED) run with everything in it; returns its id.

    `series` are stepped metrics (name, value, step), e.g. the time of each step, stamped with
    the end time; `points` are stepped metrics with their own timestamps (name, value, step,
    ms). The run spans `start_time_ms` to `end_time_ms` (the job's, when it was spooled and
    logged later). Each store call is retried while the store is busy; a run that fails midway
    is ended FAILED and tagged `tracking_error` (a later upload replaces it)."""
    from mlflow.entities import RunStatus

    mlflow = client(tracking_uri)
    run_tags = dict(tags)
    if parent_run_id:
        run_tags["mlflow.parentRunId"] = parent_run_id
    run_id = retry(
        lambda: mlflow.create_run(
            experiment_id, start_time=start_time_ms, run_name=run_name, tags=run_tags
        ),
        tracking_uri=tracking_uri,
    ).info.run_id
    end_ms = end_time_ms or now_ms()
    stamped = [*stamped_metrics(metrics, series, end_ms), *points]
    try:
        fill_run(tracking_uri, run_id, params, stamped, {}, artifacts, failed, end_ms)
    except Exception:
        with contextlib.suppress(Exception):
            mlflow.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
            mlflow.set_tag(run_id, "tracking_error", "run incomplete: logging failed midway")
        raise
    return run_id
