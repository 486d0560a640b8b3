"""The airflow-crashsafe command line: argument handling, delegation and exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airflow_crashsafe.cli import main as cli
from airflow_crashsafe.errors import ConfigurationError, StoreError


@pytest.fixture
def failing_migrate(monkeypatch: pytest.MonkeyPatch) -> Callable[[BaseException], None]:
    """Make `db migrate` raise the given exception (main() looks its handler up when it builds the parser)."""

    def install(error: BaseException) -> None:
        def fail(args: object) -> int:
            raise error

        monkeypatch.setattr(cli, "_db_migrate", fail)

    return install


@pytest.fixture
def fresh_store() -> Iterator[None]:
    """open_store() caches per process; each test starts and ends without a cached store."""
    from airflow_crashsafe.store import reset_store_cache

    reset_store_cache()
    yield
    reset_store_cache()


def _exit_code(run: Callable[[], int]) -> int:
    try:
        return run()
    except SystemExit as exc:
        return int(exc.code or 0)


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Running without a subcommand exits 2 with argparse's usage message."""
    assert _exit_code(lambda: cli.main([])) == 2
    assert "usage: airflow-crashsafe" in capsys.readouterr().err


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown subcommand exits 2."""
    assert _exit_code(lambda: cli.main(["bogus"])) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_db_without_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`db` alone exits 2 and names the missing DB_COMMAND."""
    assert _exit_code(lambda: cli.main(["db"])) == 2
    assert "DB_COMMAND" in capsys.readouterr().err


def test_help_works(capsys: pytest.CaptureFixture[str]) -> None:
    """`--help` exits 0 and lists the product commands."""
    assert _exit_code(lambda: cli.main(["--help"])) == 0
    out = capsys.readouterr().out
    assert all(command in out for command in ("db", "watch"))


def test_drill_is_not_a_product_command(capsys: pytest.CaptureFixture[str]) -> None:
    """The crash drill runs from a checkout (`./dev drill`); the console script has no `drill` command."""
    assert _exit_code(lambda: cli.main(["drill"])) == 2
    assert "invalid choice: 'drill'" in capsys.readouterr().err


def test_crashsafe_error_exits_2_with_one_line(
    failing_migrate: Callable[[BaseException], None], capsys: pytest.CaptureFixture[str]
) -> None:
    """A CrashsafeError from a command prints `airflow-crashsafe: error: <message>` and exits 2."""
    failing_migrate(ConfigurationError("connection 'x' is not PostgreSQL; fix it"))
    assert cli.main(["db", "migrate"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "airflow-crashsafe: error: connection 'x' is not PostgreSQL; fix it\n"
    assert captured.out == ""


def test_other_errors_are_not_swallowed(failing_migrate: Callable[[BaseException], None]) -> None:
    """Errors that are not CrashsafeError propagate (a traceback is the right report for a bug)."""
    failing_migrate(ZeroDivisionError())
    with pytest.raises(ZeroDivisionError):
        cli.main(["db", "migrate"])


def test_db_migrate_store_error_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A StoreError during `db migrate` exits 2 and still closes the store."""
    import airflow_crashsafe.store

    closed: list[bool] = []

    class BrokenStore:
        def migrate(self) -> int:
            raise StoreError("store unreachable; check [crashsafe] conn_id")

        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr(airflow_crashsafe.store, "open_store", BrokenStore)
    assert cli.main(["db", "migrate"]) == 2
    assert (
        capsys.readouterr().err == "airflow-crashsafe: error: store unreachable; check [crashsafe] conn_id\n"
    )
    assert closed == [True]


@pytest.mark.usefixtures("fresh_store")
def test_db_migrate_creates_embedded_sqlite_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a store connection, `db migrate` creates the embedded SQLite store and prints its version."""
    path = tmp_path / "embedded.db"
    monkeypatch.delenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", raising=False)
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__EMBEDDED_PATH", str(path))

    assert cli.main(["db", "migrate"]) == 0
    last_line = capsys.readouterr().out.splitlines()[-1]  # Airflow's log lines also go to stdout
    assert last_line.startswith("crashsafe store schema version ")
    assert int(last_line.split()[-1]) >= 1
    assert path.exists()


@pytest.mark.usefixtures("fresh_store")
def test_db_migrate_uses_store_connection(
    sqlite_url: str,
    airflow_conn: Callable[[str, str], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`db migrate` migrates the store named by [crashsafe] conn_id, and running it twice is a no-op."""
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__CONN_ID", airflow_conn("cli_store", sqlite_url))

    assert cli.main(["db", "migrate"]) == 0
    first = capsys.readouterr().out.splitlines()[-1]
    assert cli.main(["db", "migrate"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == first
    assert Path(sqlite_url.removeprefix("sqlite:///")).exists()


def test_console_script_reports_crashsafe_errors(tmp_path: Path) -> None:
    """The installed `airflow-crashsafe` script exits 2 with one stderr line for a misconfigured store."""
    script = Path(sys.executable).parent / "airflow-crashsafe"
    env = {
        **os.environ,
        "AIRFLOW__CRASHSAFE__CONN_ID": "cli_bad_store",
        "AIRFLOW_CONN_CLI_BAD_STORE": "http://example.invalid",
    }
    result = subprocess.run(
        [str(script), "db", "migrate"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 2, result
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("airflow-crashsafe: error: ")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("days", ["0", "-3", "100000000000"])
def test_db_prune_refuses_a_window_out_of_range(capsys: pytest.CaptureFixture[str], days: str) -> None:
    """`db prune --older-than` below a day (a fence a retry still needs) or past a century (a date
    overflow) exits 2 naming the flag and its range, before the store is opened."""
    assert cli.main(["db", "prune", "--older-than", days]) == 2
    err = capsys.readouterr().err
    assert f"--older-than = {days} is out of range: set it to a whole number of days from 1 to 36500" in err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["doctor", "--longest-task", "nan"], "--longest-task"),
        (["doctor", "--longest-task", "inf"], "--longest-task"),
        (["audit", "reconcile", "--timeout", "1e309"], "--timeout"),
    ],
)
def test_numeric_flags_out_of_range_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    """A flag's nan, infinite or out-of-range number exits 2 before anything runs, naming the flag."""
    assert _exit_code(lambda: cli.main(argv)) == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: '{argv[-1]}' is " in err
    assert ": set it to a " in err
