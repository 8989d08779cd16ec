"""`distbench schedule`: cron checking (croniter, within what cron and scrontab both read) and
the next occurrence, the job's command line, the scrontab block replaced (not duplicated) on a
re-run, and the printed crontab / sbatch lines.

    pytest tests/unit/test_schedule.py
"""

from __future__ import annotations

import datetime as dt
import os
import stat
from pathlib import Path

import pytest

from distbench import cli
from distbench.tools import schedule

pytestmark = pytest.mark.unit

RUN_ID = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    "expression",
    ["0 2 * * *", "*/15 9-17/4 1,15 jan-mar MON-fri", "5/20 0 * * 7", "0  2 * *  *"],
)
def test_cron_fields_numbers_names_ranges_lists_steps_are_taken(expression):
    assert schedule.parse_cron(expression).expression == " ".join(expression.split())


@pytest.mark.parametrize(
    ("macro", "after", "expected"),
    [
        ("@daily", "2026-11-22 06:30", "2026-11-23 00:00"),
        ("@midnight", "2026-11-22 06:30", "2026-11-23 00:00"),
        ("@hourly", "2026-11-22 06:30", "2026-11-22 07:00"),
        ("@weekly", "2026-11-22 06:30", "2026-11-29 00:00"),  # Sundays
        ("@monthly", "2026-11-22 06:30", "2026-12-01 00:00"),
        ("@yearly", "2026-11-22 06:30", "2027-01-01 00:00"),
        ("@Annually", "2026-11-22 06:30", "2027-01-01 00:00"),
    ],
)
def test_macros_that_cron_and_scrontab_share_are_taken(macro, after, expected):
    cron = schedule.parse_cron(macro)
    assert cron.expression == macro.lower()
    found = schedule.next_occurrence(cron, dt.datetime.fromisoformat(after))
    assert found == dt.datetime.fromisoformat(expected)
    assert schedule.scrontab_problem(cron) is None


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("0 2 * *", "has 4 field(s); need 5 fields: minute hour day-of-month month day-of-week"),
        ("0 2 * * * *", "has 6 field(s)"),  # croniter's seconds field: cron has none
        ("@reboot", "@reboot runs when a machine boots, which Slurm's scrontab refuses"),
        ("@often", "is no macro; use one of @yearly, @annually, @monthly, @weekly, @daily"),
        ("60 2 * * *", "minute '60' is not valid; it takes 0-59"),
        ("0 24 * * *", "hour '24' is not valid; it takes 0-23"),
        ("0 2 0 * *", "day-of-month '0' is not valid; it takes 1-31"),
        ("0 2 * 13 *", "month '13' is not valid; it takes 1-12 or jan-dec"),
        ("0 2 * * 8", "day-of-week '8' is not valid; it takes 0-7 or sun-sat"),
        ("0 2 * * funday", "day-of-week 'funday' is not valid"),
        ("*/0 2 * * *", "minute '*/0' is not valid"),
        ("0 5-2 * * *", "hour range '5-2' runs backwards"),
        # croniter's extensions, which neither cron nor scrontab reads
        ("0 0 L * *", "day-of-month 'L' is not valid"),
        ("0 0 * * mon#2", "day-of-week 'mon#2' is not valid"),
        ("0 0 ? * *", "day-of-month '?' is not valid"),
        ("H 2 * * *", "minute 'H' is not valid"),
    ],
)
def test_bad_cron_is_refused_in_one_line_naming_the_value(expression, message):
    with pytest.raises(ValueError) as error:
        schedule.parse_cron(expression)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert repr(expression) in str(error.value)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("30 1 * * mon-fri", "scrontab reads a day-of-week name only alone, not 'mon-fri'"),
        ("0 0 1 jan,jul *", "scrontab reads a month name only alone, not 'jan,jul'"),
        ("*/1 * * * *", "scrontab refuses the minute step in '*/1' (a step is 2 or more)"),
    ],
)
def test_what_cron_takes_but_scrontab_refuses_is_named(expression, message):
    assert message in schedule.scrontab_problem(schedule.parse_cron(expression))


def test_what_scrontab_takes_passes():
    for expression in ("30 1 * * 1-5", "0 0 1 jan *", "*/15 * * * mon", "0 */2 * * *"):
        assert schedule.scrontab_problem(schedule.parse_cron(expression)) is None


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("0 2 * * *", "2026-11-22 06:30", "2026-11-23 02:00"),
        ("0 2 * * *", "2026-11-22 01:59", "2026-11-22 02:00"),
        ("0 2 * * *", "2026-11-22 01:59:30", "2026-11-22 02:00"),
        ("0 2 * * *", "2026-11-22 02:00", "2026-11-23 02:00"),  # strictly after
        ("30 1 * * mon-fri", "2026-11-21 12:00", "2026-11-23 01:30"),  # Sat → Mon
        ("0 0 1 * mon", "2026-11-24 00:00", "2026-11-30 00:00"),  # day OR weekday: Mon 30th
        ("0 0 29 2 *", "2026-03-01 00:00", "2028-02-29 00:00"),
        ("*/10 * * * *", "2026-12-31 23:55", "2027-01-01 00:00"),
        ("0 0 * * 7", "2026-11-24 00:00", "2026-11-29 00:00"),  # 7 is Sunday too
    ],
)
def test_next_occurrence(expression, after, expected):
    found = schedule.next_occurrence(
        schedule.parse_cron(expression), dt.datetime.fromisoformat(after)
    )
    assert found == dt.datetime.fromisoformat(expected)


def test_an_impossible_date_never_matches():
    with pytest.raises(ValueError, match="never matches a real date"):
        schedule.next_occurrence(schedule.parse_cron("0 0 31 2 *"), dt.datetime(2026, 1, 1))


def test_experiment_is_picked_out_of_the_overrides():
    assert schedule.split_overrides(["experiment=grid", "world_size=2"]) == (
        "grid",
        ["world_size=2"],
    )
    assert schedule.split_overrides(["experiments=grid"]) == ("grid", [])
    for bad in ([], ["world_size=2"], ["experiment=a", "experiment=b"], ["experiment="]):
        with pytest.raises(ValueError, match="exactly one study as experiment=NAME"):
            schedule.split_overrides(bad)


def test_the_experiment_file_must_exist():
    project = Path(__file__).resolve().parents[2]
    assert schedule.check_experiment(project, "strategy_grid").name == "strategy_grid.yaml"
    with pytest.raises(ValueError, match=r"experiment=nope: no .*nope\.yaml; known: .*zero_stages"):
        schedule.check_experiment(project, "nope")


def test_job_command_runs_the_sweep_then_compares_against_the_baseline():
    project = Path("/srv/dist bench")
    command = schedule.job_command(project, "grid", ["world_size=2,4", "batch=medium"], RUN_ID)
    assert command == (
        "cd '/srv/dist bench' && .venv/bin/python run.py -m experiments=grid world_size=2,4 "
        f"batch=medium && .venv/bin/distbench compare --baseline {RUN_ID} --candidate latest"
    )
    assert "compare" not in schedule.job_command(project, "grid")
    previous = schedule.job_command(project, "grid", baseline="previous")
    assert previous.endswith(".venv/bin/distbench compare --baseline previous --candidate latest")
    with_uri = schedule.job_command(project, "grid", tracking_uri="http://mlflow:5000")
    assert with_uri.startswith("export MLFLOW_TRACKING_URI=http://mlflow:5000 && cd ")


@pytest.mark.parametrize(
    ("overrides", "baseline", "uri", "message"),
    [
        ([], "latest", None, "--baseline 'latest' is not an MLflow run id (32 hex digits) or"),
        ([], None, "http://u:pw@mlflow:5000", "'http://u:***@mlflow:5000' has a password"),
        (["hydra.sweep.dir=x/%H"], None, None, "'%' in"),
        (["a=b\nc"], None, None, "newline"),
    ],
)
def test_job_command_refuses_what_cron_or_a_crontab_cannot_hold(overrides, baseline, uri, message):
    with pytest.raises(ValueError) as error:
        schedule.job_command(Path("/p"), "grid", overrides, baseline, uri)
    assert message in str(error.value)
    assert ":pw@" not in str(error.value)


def test_crontab_line_logs_every_step_and_sbatch_begins_at_the_next_occurrence():
    cron = schedule.parse_cron("0 2 * * *")
    log = Path("/p/multirun/schedule/grid.log")
    line = schedule.crontab_line(cron, "cd /p && a && b", log)
    assert line == "0 2 * * * ( cd /p && a && b ) >> /p/multirun/schedule/grid.log 2>&1"
    sbatch = schedule.sbatch_command(
        "grid", "cd /p && a", dt.datetime(2026, 11, 23, 2), log, ["--gres=gpu:4"]
    )
    assert sbatch == (
        "sbatch --begin=2026-11-23T02:00:00 --job-name=distbench-grid "
        "--output=/p/multirun/schedule/grid.log --open-mode=append --gres=gpu:4 "
        "'--wrap=cd /p && a'"
    )


def block(name="grid", command="cd /p && run", cron="0 2 * * *"):
    return schedule.scrontab_block(
        name, schedule.parse_cron(cron), command, Path(f"/p/{name}.log"), ["--gres=gpu:4"]
    )


def test_scrontab_block_has_markers_and_options_right_before_its_entry():
    lines = block().splitlines()
    assert lines[0].startswith("# distbench schedule grid BEGIN")
    assert lines[1:5] == [
        "#SCRON --job-name=distbench-grid",
        "#SCRON --output=/p/grid.log",
        "#SCRON --open-mode=append",
        "#SCRON --gres=gpu:4",
    ]
    assert lines[5] == "0 2 * * * cd /p && run"
    assert lines[6] == "# distbench schedule grid END"


def test_merging_appends_once_and_replaces_on_rerun_keeping_everything_else():
    users = "MAILTO=me\n#SCRON -p debug\n*/5 * * * * ./mine.sh\n"
    first = schedule.merge_crontab(users, "grid", block())
    assert first == users + block()
    assert schedule.merge_crontab(first, "grid", block()) == first  # idempotent
    other = schedule.merge_crontab(first, "grid2", block("grid2", command="cd /q && run"))
    changed = schedule.merge_crontab(other, "grid", block(cron="30 3 * * *"))
    assert changed.count("distbench schedule grid BEGIN") == 1
    assert "30 3 * * * cd /p && run" in changed and "0 2 * * * cd /p && run" not in changed
    assert changed.startswith(users) and block("grid2", command="cd /q && run") in changed
    assert schedule.merge_crontab("", "grid", block()) == block()


def test_an_unterminated_block_is_refused():
    broken = block().replace("# distbench schedule grid END\n", "")
    with pytest.raises(ValueError, match="no '# distbench schedule grid END'; fix it"):
        schedule.merge_crontab(broken, "grid", block())


def test_names_and_slurm_options_are_checked():
    assert schedule.check_name("grid.v2-nightly_1") == "grid.v2-nightly_1"
    with pytest.raises(ValueError, match="schedule name 'a b' may hold only"):
        schedule.check_name("a b")
    with pytest.raises(ValueError, match="--slurm-option 'gres=gpu:4' is not one sbatch option"):
        schedule.check_slurm_options(["gres=gpu:4"])


# --------------------------------------------------------------------------- the command


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project dir with one study, and a stand-in `scrontab` (Slurm's client is not on this
    machine) that keeps the user's table in a file, as scrontab -l / scrontab FILE do."""
    home = tmp_path / "project"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "config.yaml").write_text("defaults: []\n")
    (home / "experiments").mkdir()
    (home / "experiments" / "nightly.yaml").write_text("# @package _global_\n")
    monkeypatch.setenv("DISTBENCH_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    table = tmp_path / "table"
    script = bin_dir / "scrontab"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-l" ]; then [ -f {table} ] && exec cat {table}; '
        'echo "no crontab for $USER" >&2; exit 1; fi\n'
        f'cp "$1" {table}\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return home, bin_dir, table


ARGS = ["schedule", "experiment=nightly", "--cron", "0 2 * * *", "world_size=2", "--baseline"]


def test_dry_run_prints_the_crontab_line_and_the_sbatch_equivalent(project, capsys):
    home, _, table = project
    assert cli.main([*ARGS, RUN_ID, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "(--dry-run): nothing installed" in out
    assert (
        f"0 2 * * * ( cd {home} && .venv/bin/python run.py -m experiments=nightly world_size=2 "
        f"&& .venv/bin/distbench compare --baseline {RUN_ID} --candidate latest ) >> "
        f"{home}/multirun/schedule/nightly.log 2>&1"
    ) in out
    assert "sbatch --begin=" in out and "--job-name=distbench-nightly" in out
    assert not table.exists()


def test_with_scrontab_the_entry_is_installed_once_and_replaced_on_rerun(
    project, capsys, monkeypatch
):
    home, bin_dir, table = project
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert cli.main([*ARGS, RUN_ID]) == 0  # no table yet: "no crontab for ..."
    assert "installed in your scrontab" in capsys.readouterr().out
    table.write_text("MAILTO=me\n" + table.read_text())
    assert cli.main(["schedule", "--cron", "15 3 * * *", "experiment=nightly"]) == 0
    installed = table.read_text()
    assert installed.startswith("MAILTO=me\n")
    assert installed.count("# distbench schedule nightly BEGIN") == 1
    assert "15 3 * * * cd " in installed and "0 2 * * *" not in installed
    assert (home / "multirun" / "schedule").is_dir()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["experiment=nightly", "--cron", "0 2 * *"], "distbench: schedule: cron '0 2 * *' has 4"),
        (
            ["experiment=nightly", "--cron", "@reboot"],
            "distbench: schedule: cron '@reboot': @reboot",
        ),
        (["experiment=nope", "--cron", "0 2 * * *"], "experiment=nope: no "),
        (["--cron", "0 2 * * *", "world_size=2"], "exactly one study as experiment=NAME"),
    ],
)
def test_bad_input_exits_2_in_one_line(project, capsys, argv, message):
    assert cli.main(["schedule", *argv, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_macro_schedules_as_written(project, capsys):
    home, _, _ = project
    argv = ["schedule", "experiment=nightly", "--cron", "@daily", "--baseline", "previous"]
    assert cli.main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"@daily ( cd {home} && " in out
    assert "compare --baseline previous --candidate latest" in out
    assert "\n@daily cd " in out  # the scrontab block's entry
    assert "sbatch --begin=" in out and "T00:00:00" in out  # the next midnight


def test_what_scrontab_refuses_is_refused_before_installing(project, capsys, monkeypatch):
    _, bin_dir, table = project
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert cli.main(["schedule", "experiment=nightly", "--cron", "30 1 * * mon-fri"]) == 2
    err = capsys.readouterr().err
    assert "scrontab reads a day-of-week name only alone, not 'mon-fri'" in err
    assert len(err.strip().splitlines()) == 1 and not table.exists()
