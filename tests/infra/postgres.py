"""A real PostgreSQL server started on this machine for tests: its own data dir in a temporary
dir, listening on 127.0.0.1 on a free port, with a database and a role that logs in with a
password (scram-sha-256), as a team's MLflow backend would.

Needs Debian's PostgreSQL binaries (`apt-get install -y postgresql`: initdb, pg_ctl under
/usr/lib/postgresql/<version>/bin). PostgreSQL refuses to run as root, so as root everything runs
as the `postgres` system user (`runuser -u postgres --`); as another user, as that user. Without
the binaries, the `postgres_server` fixture skips with the reason from `postgres_missing()`.

    from tests.infra.postgres import postgres_server  # noqa: F401

    def test_something(postgres_server):
        psycopg2.connect(postgres_server.uri, password=postgres_server.password)

By hand:

    python -m tests.infra.postgres      # start, print the URI, Ctrl-C to stop
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

SEARCH_DIRS = ("/usr/lib/postgresql/*/bin", "/usr/local/bin", "/usr/bin")
SERVICE_USER = "postgres"
DATABASE = "mlflow"
ROLE = "distbench"
START_TIMEOUT_S = 60


@dataclass(frozen=True)
class Postgres:
    """A running server: connect with `uri` (no password in it) and `password`."""

    host: str
    port: int
    database: str
    user: str
    password: str
    data_dir: Path

    @property
    def uri(self) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.database}"


def find_bin_dir() -> Path | None:
    """The directory holding initdb and pg_ctl (the newest Debian version first)."""
    candidates = sorted(Path("/").glob("usr/lib/postgresql/*/bin"), reverse=True)
    candidates += [Path(p) for p in SEARCH_DIRS[1:]]
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory
    return None


def _run_as() -> list[str]:
    """The prefix that runs a command as a user PostgreSQL accepts (never root)."""
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", SERVICE_USER, "--"]


def postgres_missing() -> str | None:
    """Why the fixture cannot run here, or None."""
    if find_bin_dir() is None:
        return "PostgreSQL binaries (initdb, pg_ctl) not found; apt-get install -y postgresql"
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing (PostgreSQL refuses to run as root)"
        try:
            pwd.getpwnam(SERVICE_USER)
        except KeyError:
            return f"running as root and there is no {SERVICE_USER!r} user to run PostgreSQL as"
    return None


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _chown_to_service_user(path: Path) -> None:
    if os.geteuid() == 0:
        user = pwd.getpwnam(SERVICE_USER)
        os.chown(path, user.pw_uid, user.pw_gid)


def _run(cmd: list[str], root: Path) -> None:
    """Run a PostgreSQL tool; on failure, an AssertionError with its output and the server log."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    if done.returncode != 0:
        log = root / "server.log"
        tail = log.read_text()[-2000:] if log.exists() else ""
        raise AssertionError(f"{Path(cmd[len(_run_as())]).name} failed: {done.stderr}{tail}")


@contextmanager
def running_postgres(base_dir: Path | None = None) -> Iterator[Postgres]:
    """Start a fresh server (initdb, pg_ctl start), create the role and database, yield it,
    then stop it (pg_ctl stop -m fast) and delete its files."""
    import psycopg2

    bin_dir = find_bin_dir()
    assert bin_dir is not None, postgres_missing()
    # not under pytest's tmp dirs: those are private to root, and the server runs as postgres
    root = Path(tempfile.mkdtemp(prefix="distbench-pg-", dir=base_dir))
    data_dir = root / "data"
    superuser_password = secrets.token_hex(16)
    password = "pw-" + secrets.token_hex(12)  # unique: a test can look for it anywhere
    pwfile = root / "superuser.pw"
    pwfile.write_text(superuser_password + "\n")
    os.chmod(pwfile, 0o600)
    for path in (root, pwfile):
        _chown_to_service_user(path)
    port = free_port()
    as_user = _run_as()
    try:
        initdb = [str(bin_dir / "initdb"), "-D", str(data_dir), "-U", SERVICE_USER]
        flags = [f"--pwfile={pwfile}", "--auth=scram-sha-256", "--encoding=UTF8", "--no-sync"]
        _run([*as_user, *initdb, *flags], root)
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off"
        pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(data_dir), "-o", options]
        start = ["-l", str(root / "server.log"), "-w", "-t", str(START_TIMEOUT_S), "start"]
        _run([*as_user, *pg_ctl, *start], root)
        admin = psycopg2.connect(
            host="127.0.0.1",
            port=port,
            user=SERVICE_USER,
            password=superuser_password,
            dbname="postgres",
        )
        admin.autocommit = True
        with admin.cursor() as cursor:
            # psycopg2 quotes the literal client-side: no password in any argv or log line
            cursor.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD %s", (password,))
            cursor.execute(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
        admin.close()
        yield Postgres("127.0.0.1", port, DATABASE, ROLE, password, data_dir)
    finally:
        subprocess.run(
            [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data_dir), "-m", "fast", "stop"],
            capture_output=True,
            timeout=START_TIMEOUT_S,
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[Postgres]:
    """A fresh PostgreSQL for the test module; skipped with the reason where it cannot run."""
    reason = postgres_missing()
    if reason:
        pytest.skip(reason)
    with running_postgres() as server:
        yield server


if __name__ == "__main__":
    import signal

    problem = postgres_missing()
    if problem:
        raise SystemExit(problem)
    with running_postgres() as server:
        print(f"{server.uri}  (PGPASSWORD={server.password}); Ctrl-C stops it", flush=True)
        with suppress(KeyboardInterrupt):
            signal.pause()
