"""`distbench server`'s URI and credential handling: the password reaches the server process only
through its environment, never argv or printed text; and `tracking=server` points at a URI that
$MLFLOW_TRACKING_URI overrides.

    pytest tests/unit/test_server.py
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from distbench import cli
from distbench.tools import server
from distbench.tracking.sweep import resolve_tracking_uri
from tests.conftest import compose_config

pytestmark = pytest.mark.unit

PASSWORD = "s3cr3t-Pw_9"
PG = "postgresql://mlflow@db.internal:5432/mlflow"


def test_default_backend_is_a_sqlite_file_under_root(tmp_path):
    assert server.backend_uri(None, tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert server.backend_uri("sqlite:///x/y.db", tmp_path) == "sqlite:///x/y.db"
    pinned = "postgresql+psycopg2://mlflow@db.internal:5432/mlflow"  # not SQLAlchemy's psycopg 3
    assert server.backend_uri(PG, tmp_path) == pinned
    assert server.backend_uri(pinned, tmp_path) == pinned


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        ("mysql://u@h/db", "is not supported; use postgresql://user@host:port/db or sqlite:///"),
        ("postgres://u@h/db", "is not supported"),
        ("sqlite://", "names no file"),
        ("postgresql://u@h", "needs a host and a database"),
        ("just-a-path.db", "is not supported"),
    ],
)
def test_bad_backends_are_refused_in_one_line(backend, expected, tmp_path):
    with pytest.raises(ValueError, match=expected) as error:
        server.backend_uri(backend, tmp_path)
    assert "\n" not in str(error.value)


def test_a_password_in_the_backend_uri_is_refused_and_never_echoed(tmp_path):
    with pytest.raises(ValueError) as error:
        server.backend_uri(f"postgresql://mlflow:{PASSWORD}@db:5432/mlflow", tmp_path)
    message = str(error.value)
    assert PASSWORD not in message
    assert "postgresql://mlflow:***@db:5432/mlflow" in message and "PGPASSWORD" in message


def test_password_comes_from_the_file_then_pgpassword_then_libpq(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text(PASSWORD + "\nignored second line\n")
    env = {"PGPASSWORD": "from-env"}
    assert server.password_for(PG, env, secret) == (PASSWORD, f"--password-file {secret}")
    assert server.password_for(PG, env) == ("from-env", "$PGPASSWORD")
    password, source = server.password_for(PG, {})
    assert password is None and "~/.pgpass" in source
    assert server.password_for("sqlite:///x.db", env) == (None, None)


@pytest.mark.parametrize(
    ("content", "backend", "expected"),
    [
        (None, PG, "No such file"),
        ("", PG, "is empty"),
        ("pw", "sqlite:///x.db", "applies to postgresql backends only"),
    ],
)
def test_bad_password_files_are_refused(content, backend, expected, tmp_path):
    path = tmp_path / "pw"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=expected):
        server.password_for(backend, {}, path)


def test_the_password_is_in_the_childs_environment_only(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text(PASSWORD)
    for env, password_file in (({"PGPASSWORD": PASSWORD}, None), ({}, secret)):
        plan = server.plan_server(PG, tmp_path, env=env, password_file=password_file, port=5123)
        assert PASSWORD not in " ".join(plan.argv)
        assert plan.env["PGPASSWORD"] == PASSWORD
        printed = "\n".join(server.startup_lines(plan))
        assert PASSWORD not in printed
        assert "export MLFLOW_TRACKING_URI=http://127.0.0.1:5123" in printed
        assert "backend postgresql+psycopg2://mlflow@db.internal:5432/mlflow" in printed


def test_the_server_command_serves_artifacts_on_loopback_by_default(tmp_path):
    plan = server.plan_server(None, tmp_path, env={}, port=5123, workers=1)
    argv = plan.argv
    assert argv[1:4] == ["-m", "mlflow", "server"]
    assert argv[argv.index("--backend-store-uri") + 1] == f"sqlite:///{tmp_path}/mlflow.db"
    assert argv[argv.index("--artifacts-destination") + 1] == str(tmp_path / "artifacts")
    assert "--serve-artifacts" in argv
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "5123"
    assert argv[argv.index("--workers") + 1] == "1"
    assert plan.env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    assert plan.health_url == "http://127.0.0.1:5123/health"
    assert "PGPASSWORD" not in plan.env


def test_a_wildcard_bind_advertises_this_host_and_probes_loopback():
    assert server.client_url("0.0.0.0", 5000) == f"http://{socket.getfqdn()}:5000"
    assert server.health_url("0.0.0.0", 5000) == "http://127.0.0.1:5000/health"
    assert server.client_url("::1", 5000) == "http://[::1]:5000"


@pytest.mark.parametrize(("port", "workers"), [(0, 1), (70000, 1), (5000, 0)])
def test_bad_ports_and_worker_counts_are_refused(port, workers, tmp_path):
    with pytest.raises(ValueError, match=r"--port|--workers"):
        server.plan_server(None, tmp_path, env={}, port=port, workers=workers)


def test_a_taken_port_is_found_before_start_up():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(server.ServerError, match=f"port {port} on 127.0.0.1 is in use"):
            server.check_port_free("127.0.0.1", port)


def test_an_unreachable_postgres_fails_in_one_line_without_the_password():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    uri = f"postgresql://mlflow@127.0.0.1:{port}/mlflow"
    with pytest.raises(server.ServerError) as error:
        server.check_postgres(uri, PASSWORD, timeout_s=5)
    message = str(error.value)
    assert message.startswith(f"cannot connect to {uri}: ") and "\n" not in message
    assert PASSWORD not in message


def test_cli_refuses_a_password_on_the_command_line_with_exit_2(capsys):
    code = cli.main(["server", "--backend", f"postgresql://u:{PASSWORD}@h:5432/db"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("distbench: server: --backend")
    assert PASSWORD not in err


def test_group_readable_password_files_are_warned_about(tmp_path):
    path = tmp_path / "pw"
    path.write_text(PASSWORD)
    path.chmod(0o644)
    assert "chmod 600" in server.warn_if_readable_by_others(path)
    path.chmod(0o600)
    assert server.warn_if_readable_by_others(path) is None


def test_tracking_server_config_points_at_a_uri_that_the_environment_overrides(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("DISTBENCH_TRACKING_URI", raising=False)
    tracking = compose_config(["tracking=server"]).tracking
    assert tracking.backend == "server"
    assert resolve_tracking_uri(tracking, Path(tmp_path)) == "http://127.0.0.1:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.team:8080")
    assert resolve_tracking_uri(tracking, Path(tmp_path)) == "http://mlflow.team:8080"


def test_the_ui_runs_mlflow_ui_with_one_worker_and_no_job_runners():
    plan = server.plan_ui("sqlite:////tmp/x/mlflow.db", port=5055, env={})
    argv = plan.argv
    assert argv[1:4] == ["-m", "mlflow", "ui"]
    assert argv[argv.index("--workers") + 1] == "1"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--backend-store-uri") + 1] == "sqlite:////tmp/x/mlflow.db"
    assert plan.env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    assert plan.health_url == "http://127.0.0.1:5055/health" and plan.artifacts is None
    assert server.plan_ui("sqlite:///y.db", workers=3, env={}).argv[-1] == "3"


def test_the_ui_says_where_mlflow_3_keeps_training_runs():
    plan = server.plan_ui("sqlite:///y.db", env={})
    lines = server.ui_lines(plan, "http://127.0.0.1:5000/#/experiments/1/runs")
    assert lines[0].endswith("http://127.0.0.1:5000/#/experiments/1/runs") and "ready" in lines[0]
    assert '"Model training"' in lines[1] and '"GenAI"' in lines[1]


@pytest.mark.parametrize(("port", "workers"), [(0, 1), (5000, 0)])
def test_the_ui_refuses_bad_ports_and_worker_counts_with_exit_2(port, workers, capsys):
    argv = ["ui", "--tracking-uri", "sqlite:///never.db", "--port", str(port)]
    assert cli.main([*argv, "--workers", str(workers)]) == 2
    assert capsys.readouterr().err.startswith("distbench: ui: --")
