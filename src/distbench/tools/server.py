"""`distbench server`: a team's MLflow tracking server, in the foreground, credentials kept out of
argv and output.

The backend is PostgreSQL (`--backend postgresql://user@host:port/db`) or sqlite (default:
`sqlite:///<root>/mlflow.db`); artifacts are served over HTTP (`--serve-artifacts`) from
`--artifacts-destination` (default `<root>/artifacts`), so clients need no shared filesystem.
The password never goes into a URI, argv or a printed line: it comes from `--password-file`,
else `$PGPASSWORD`, else libpq's own `$PGPASSFILE` / `~/.pgpass`, and reaches the server only as
`PGPASSWORD` in the server process's environment (libpq reads it there). A `--backend` with a
password in it is refused: every user of the machine can read argv (`ps`).

`distbench ui` starts the same way (`plan_ui`: `mlflow ui` on the local store, one worker, job
execution off) and, like the server, prints its URL only once GET /health answers. Either dies
with the process that started it, even SIGKILLed (launch/lifeline.py: mlflow gets the parent-death
signal, a guard stops the workers it forked), so no orphan keeps the port.

    distbench server --backend postgresql://mlflow@db.internal:5432/mlflow --host 0.0.0.0
    PGPASSWORD=... distbench server --backend postgresql://mlflow@127.0.0.1:5432/mlflow
    distbench server --root /shared/mlflow --port 5000        # sqlite, for a small team
    python -c "import distbench.tools.server as s, time; print(s.start_server(root='/tmp/m')[1]); \
time.sleep(600)"      # the server lives as long as the python that started it
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from distbench.launch.lifeline import die_with_parent, group_alive, start_group_guard
from distbench.tracking.secrets_mask import mask_text

DEFAULT_ROOT = Path("mlflow-server")
DEFAULT_PORT = 5000
DEFAULT_WORKERS = 2
# `distbench ui`: one person's browser. mlflow's default (4 workers + job runners) made 15
# processes and 3.1 GiB on a 2-core box.
DEFAULT_UI_WORKERS = 1
DEFAULT_TIMEOUT_S = 180.0  # the server is up in ~17 s on 2 cores; a fresh PostgreSQL migrates
POSTGRES_SCHEMES = ("postgresql", "postgresql+psycopg2")
# SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3; the dependency is psycopg2-binary
POSTGRES_DRIVER_SCHEME = "postgresql+psycopg2"
ALLOWED_BACKENDS = "postgresql://user@host:port/db or sqlite:///path"
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
STOP_GRACE_S = 20.0


class ServerError(RuntimeError):
    """The server could not be started; the message is one line, with no secret in it."""


@dataclass(frozen=True)
class ServerPlan:
    """Everything needed to start the server: argv and environment of the child process, the
    URL clients use, where the health check goes, and what may be printed about the backend."""

    argv: list[str]
    env: dict[str, str]
    host: str
    port: int
    url: str
    health_url: str
    backend_uri: str  # server: never a password (backend_uri refuses one); ui: masked when shown
    artifacts: Path | None  # None: the ui, whose experiments keep their own artifact locations
    password_source: str | None

    @property
    def backend_display(self) -> str:
        return mask_text(self.backend_uri)


def backend_uri(backend: str | None, root: Path) -> str:
    """The backend store URI: `backend` checked (postgresql:// pinned to the psycopg2 driver), or
    sqlite:///<root>/mlflow.db. Raises ValueError (one line, password masked) for another scheme
    or a password in the URI."""
    if not backend:
        return f"sqlite:///{(Path(root) / 'mlflow.db').resolve()}"
    scheme = backend.split("://", 1)[0].lower() if "://" in backend else ""
    if scheme == "sqlite":
        if not backend.startswith("sqlite:///") or backend == "sqlite:///":
            raise ValueError(f"--backend {backend!r} names no file; use {ALLOWED_BACKENDS}")
        return backend
    if scheme not in POSTGRES_SCHEMES:
        raise ValueError(
            f"--backend {mask_text(backend)!r} is not supported; use {ALLOWED_BACKENDS}"
        )
    parts = urlsplit(backend)
    if parts.password is not None:
        raise ValueError(
            f"--backend {mask_text(backend)!r} has a password in it, and argv is readable by "
            "every user (ps); put the password in $PGPASSWORD, --password-file or ~/.pgpass"
        )
    if not parts.hostname or not parts.path.strip("/"):
        raise ValueError(
            f"--backend {backend!r} needs a host and a database; use {ALLOWED_BACKENDS}"
        )
    return f"{POSTGRES_DRIVER_SCHEME}://{backend.split('://', 1)[1]}"


def is_postgres(uri: str) -> bool:
    return uri.split("://", 1)[0].lower() in POSTGRES_SCHEMES


def read_password_file(path: Path) -> str:
    """The password: the file's first line. Raises ValueError when it is missing or empty."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"--password-file {path}: {exc.strerror}") from exc
    password = text.splitlines()[0] if text.strip() else ""
    if not password:
        raise ValueError(f"--password-file {path} is empty; put the password on its first line")
    return password


def password_for(
    uri: str, env: Mapping[str, str], password_file: Path | None = None
) -> tuple[str | None, str | None]:
    """(password, where it came from) for a PostgreSQL backend: --password-file, else
    $PGPASSWORD, else (None, libpq's files), which libpq itself reads in the server process."""
    if not is_postgres(uri):
        if password_file is not None:
            raise ValueError(f"--password-file {password_file} applies to postgresql backends only")
        return None, None
    if password_file is not None:
        return read_password_file(password_file), f"--password-file {password_file}"
    if env.get("PGPASSWORD"):
        return env["PGPASSWORD"], "$PGPASSWORD"
    return None, "libpq ($PGPASSFILE or ~/.pgpass), if the server asks for one"


def client_url(host: str, port: int) -> str:
    """The URL clients put in MLFLOW_TRACKING_URI: this machine's name for a wildcard bind."""
    name = socket.getfqdn() if host in WILDCARD_HOSTS else host
    return f"http://[{name}]:{port}" if ":" in name else f"http://{name}:{port}"


def health_url(host: str, port: int) -> str:
    probe = "127.0.0.1" if host in WILDCARD_HOSTS else host
    return f"{client_url(probe, port)}/health"


def check_listen(port: int, workers: int) -> None:
    """ValueError (one line, naming the value) for a port or worker count MLflow cannot use."""
    if not 0 < port < 65536:
        raise ValueError(f"--port {port} is not a TCP port; use 1..65535")
    if workers < 1:
        raise ValueError(f"--workers {workers} must be at least 1")


def listening_plan(
    argv: list[str],
    env: dict[str, str],
    host: str,
    port: int,
    backend_uri: str,
    artifacts: Path | None = None,
    password_source: str | None = None,
) -> ServerPlan:
    """The ServerPlan of an MLflow process bound to host:port: its client and /health URLs."""
    return ServerPlan(
        argv=argv,
        env=env,
        host=host,
        port=port,
        url=client_url(host, port),
        health_url=health_url(host, port),
        backend_uri=backend_uri,
        artifacts=artifacts,
        password_source=password_source,
    )


def plan_server(
    backend: str | None = None,
    root: Path = DEFAULT_ROOT,
    artifacts_destination: Path | None = None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    workers: int = DEFAULT_WORKERS,
    env: Mapping[str, str] | None = None,
    password_file: Path | None = None,
    allowed_hosts: str | None = None,
) -> ServerPlan:
    """The `mlflow server` command and its environment (pure but for reading a password file).
    The password is only ever in `env["PGPASSWORD"]`, never in argv or `backend_display`."""
    env = dict(os.environ if env is None else env)
    check_listen(port, workers)
    uri = backend_uri(backend, Path(root))
    password, source = password_for(uri, env, password_file)
    artifacts = Path(artifacts_destination or Path(root) / "artifacts").resolve()
    argv = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri]
    argv += ["--artifacts-destination", str(artifacts), "--serve-artifacts"]
    argv += ["--host", host, "--port", str(port), "--workers", str(workers)]
    if allowed_hosts:
        argv += ["--allowed-hosts", allowed_hosts]
    if password is not None:
        env["PGPASSWORD"] = password
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")  # ~500 MB instead of ~1 GB
    return listening_plan(argv, env, host, port, uri, artifacts, source)


def plan_ui(
    tracking_uri: str,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    workers: int = DEFAULT_UI_WORKERS,
    env: Mapping[str, str] | None = None,
) -> ServerPlan:
    """The `mlflow ui` command of `distbench ui` on a local store (pure): `workers` worker
    processes and no job runners, which the UI of a benchmark's runs does not use."""
    check_listen(port, workers)
    env = dict(os.environ if env is None else env)
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    argv = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri]
    argv += ["--host", host, "--port", str(port), "--workers", str(workers)]
    return listening_plan(argv, env, host, port, tracking_uri)


# Where MLflow 3's UI hides training runs, in its own words (the sidebar's workflow switch).
MODEL_TRAINING_HINT = (
    'MLflow 3 opens in its "GenAI" view: pick "Model training" in the GenAI / Model training '
    "switch of the left sidebar to see runs, their params, metrics and charts (the browser "
    "remembers it)"
)


def ui_lines(plan: ServerPlan, experiment_url: str) -> list[str]:
    """What `distbench ui` prints once the UI answers: the runs page, the view to pick, how to
    stop it."""
    return [
        f"distbench: MLflow UI ready for {plan.backend_display}: {experiment_url}",
        f"distbench: {MODEL_TRAINING_HINT}",
        "distbench: Ctrl-C (or SIGTERM) stops it",
    ]


def startup_lines(plan: ServerPlan) -> list[str]:
    """What `distbench server` prints once the server answers: no secret in any line."""
    source = f", password from {plan.password_source}" if plan.password_source else ""
    return [
        f"distbench: MLflow tracking server up at {plan.url} "
        f"(backend {plan.backend_display}{source}; artifacts {plan.artifacts})",
        f"export MLFLOW_TRACKING_URI={plan.url}",
        "distbench: Ctrl-C (or SIGTERM) stops it",
    ]


# --------------------------------------------------------------------------- processes


def check_port_free(host: str, port: int) -> None:
    """Raise ServerError when `port` is taken on `host` (found now, not after 20 s of start-up)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ServerError(
                    f"port {port} on {host} is in use; pick another with --port"
                ) from exc
            raise ServerError(f"cannot bind {host}:{port}: {exc.strerror}") from exc


def check_postgres(uri: str, password: str | None, timeout_s: int = 10) -> None:
    """Connect once, so that a wrong password or host fails in one line now, not as a server that
    never comes up. Raises ServerError with libpq's first line (libpq never echoes passwords)."""
    try:
        import psycopg2
    except ImportError as exc:  # MLflow's server needs the same driver
        raise ServerError(
            f"{mask_text(uri)} needs PostgreSQL's driver: pip install -e '.[server]' "
            "(psycopg2-binary)"
        ) from exc

    dsn = "postgresql://" + uri.split("://", 1)[1]  # libpq knows no "+psycopg2"
    kwargs = {"password": password} if password is not None else {}
    try:
        psycopg2.connect(dsn, connect_timeout=timeout_s, **kwargs).close()
    except psycopg2.Error as exc:
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        raise ServerError(f"cannot connect to {mask_text(uri)}: {mask_text(first)}") from exc


def wait_healthy(proc: subprocess.Popen, url: str, timeout_s: float) -> None:
    """Poll `url` until it answers 200 OK; ServerError if the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"the MLflow server exited with code {proc.returncode} at start-up")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise ServerError(f"the MLflow server did not answer {url} within {timeout_s:.0f} s")


def stop_server(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the server's whole process group (its workers too); SIGKILL what is left after
    `grace_s`; reap the main process."""
    deadline = time.monotonic() + grace_s
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def start_server(
    backend: str | None = None,
    root: Path | str = DEFAULT_ROOT,
    artifacts_destination: Path | str | None = None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    workers: int = DEFAULT_WORKERS,
    env: Mapping[str, str] | None = None,
    password_file: Path | str | None = None,
    allowed_hosts: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    log_path: Path | str | None = None,
) -> tuple[subprocess.Popen, str]:
    """Start `mlflow server` in its own process group and wait until GET /health is OK.

    Returns (process, client URL). Raises ValueError for bad input, ServerError when it does not
    come up (the process is stopped then). The server's output goes to `log_path` (appended),
    else to this process's stdout/stderr. Stop it with `stop_server(process)`."""
    plan = plan_server(
        backend,
        Path(root),
        Path(artifacts_destination) if artifacts_destination else None,
        host,
        port,
        workers,
        env,
        Path(password_file) if password_file else None,
        allowed_hosts,
    )
    return launch(plan, timeout_s, log_path)


def launch(
    plan: ServerPlan, timeout_s: float = DEFAULT_TIMEOUT_S, log_path: Path | str | None = None
) -> tuple[subprocess.Popen, str]:
    """Start a planned server and wait for its health check (see start_server)."""
    check_port_free(plan.host, plan.port)
    if is_postgres(plan.backend_uri):
        check_postgres(plan.backend_uri, plan.env.get("PGPASSWORD"))
    elif plan.backend_uri.startswith("sqlite:///"):
        db = Path(plan.backend_uri.removeprefix("sqlite:///"))
        db.parent.mkdir(parents=True, exist_ok=True)
    if plan.artifacts is not None:
        plan.artifacts.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "a") if log_path else None  # noqa: SIM115 (the child keeps it)
    try:
        proc = subprocess.Popen(
            plan.argv,
            env=plan.env,
            stdout=log,
            stderr=subprocess.STDOUT if log else None,
            start_new_session=True,  # one process group: stop_server reaches the workers
            preexec_fn=die_with_parent(),  # even a SIGKILLed distbench takes the server along
        )
    finally:
        if log:
            log.close()
    try:
        start_group_guard(proc.pid)  # ... and its workers, which no parent-death signal reaches
        wait_healthy(proc, plan.health_url, timeout_s)
    except BaseException:
        stop_server(proc)
        raise
    return proc, plan.url


def serve(
    proc: subprocess.Popen, lines: list[str] | tuple[str, ...] = (), command: str = "server"
) -> int:
    """Print `lines`, then stay in the foreground until the server exits or this process gets
    SIGINT (Ctrl-C), SIGTERM or SIGHUP, which stop the server's whole process group. 0 when
    stopped by a signal, 1 when the server died on its own."""
    stopped: list[int] = []

    def forward(signum: int, frame: object) -> None:
        stopped.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    # one write: the server's own log lines (same stdout) cannot land between them
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()
    proc.wait()
    stop_server(proc, grace_s=STOP_GRACE_S)  # workers that outlived the main process
    if stopped:
        print(f"distbench: {command} stopped ({signal.Signals(stopped[0]).name})", flush=True)
        return 0
    print(f"distbench: the MLflow server exited by itself (code {proc.returncode})", flush=True)
    return 1


def run_foreground(
    plan: ServerPlan,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    log_path: Path | str | None = None,
    lines: list[str] | None = None,
    command: str = "server",
) -> int:
    """`distbench server` (and `distbench ui`): start, wait for /health, print `lines` (default:
    the URL and the export line), serve until stopped. SIGTERM or SIGHUP during start-up stop
    the half-started server like Ctrl-C does."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)
    try:
        proc, _ = launch(plan, timeout_s, log_path)
    except ServerError as exc:
        print(f"distbench: {command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"distbench: {command}: interrupted during start-up; stopped", file=sys.stderr)
        return 130
    return serve(proc, startup_lines(plan) if lines is None else lines, command)


def warn_if_readable_by_others(path: Path) -> str | None:
    """A warning when a password file is readable by group or others (libpq refuses such a
    ~/.pgpass); None when it is private."""
    mode = Path(path).stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return f"distbench: warning: {path} is readable by others (chmod 600 {path})"
    return None
