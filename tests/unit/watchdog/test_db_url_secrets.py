"""A metadata-DB password never reaches the watchdog's log, alerts, state, outbox or exit message."""

from __future__ import annotations

import argparse
import json
import logging
import socket
import threading
from pathlib import Path

import pytest

from airflow_crashsafe.watchdog import cli
from airflow_crashsafe.watchdog.db import DbSource
from tests.support.httpserver import serve

SECRET = "Hunter2Secret"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: The password in each place libpq takes it, at a port nothing listens on (filled in per test).
URLS = [
    f"postgresql://airflow:{SECRET}@127.0.0.1:{{port}}/airflow",
    f"postgres://airflow@127.0.0.1:{{port}}/airflow?sslmode=disable&password={SECRET}",
    f"postgresql+psycopg2://airflow@127.0.0.1:{{port}}/airflow?password={SECRET}&connect_timeout=2",
    f"postgresql://airflow:{SECRET}%zz@127.0.0.1:{{port}}/airflow",  # libpq quotes this one back
]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("template", URLS)
def test_db_unreachable_pages_without_the_password(
    template: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`watch --once --db-url-env` on an unreachable DB: the db_unreachable page (webhook, outbox,
    state), the log and the exit message name the database, never its password."""
    url = template.format(port=_closed_port())
    monkeypatch.setenv("CRASHSAFE_TEST_DB_URL", url)
    with serve() as hook:
        config = tmp_path / "watch.json"
        config.write_text(json.dumps({"sinks": [{"type": "webhook", "url": hook.url + "/h"}]}))
        args = parse(
            "--config",
            str(config),
            "--db-url-env",
            "CRASHSAFE_TEST_DB_URL",
            "--state-dir",
            str(tmp_path),
            "--once",
        )
        with caplog.at_level(logging.DEBUG):
            assert cli.run(args) == 1
        sent = [r.body.decode() for r in hook.requests]
    err = capsys.readouterr().err
    assert "db_unreachable" in err
    assert any("db_unreachable" in body for body in sent)
    where = {
        "stderr": err,
        "log": caplog.text,
        "webhook": "\n".join(sent),
        **{
            p.name: p.read_text()
            for p in tmp_path.iterdir()
            if p.is_file() and p.suffix in (".json", ".jsonl")
        },
    }
    assert "127.0.0.1" in where["webhook"]  # the alert still says which database
    assert {name: SECRET in text for name, text in where.items()} == dict.fromkeys(where, False)


@pytest.mark.parametrize("template", URLS)
def test_the_watching_line_names_the_database_without_its_password(
    template: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The long-running watchdog's "watching …" line shows the URL with its password masked."""
    url = template.format(port=_closed_port())
    watchdog, _ = cli._build(parse("--db-url", url, "--state-dir", str(tmp_path)))
    stop = threading.Event()
    stop.set()  # log the line, poll nothing
    with caplog.at_level(logging.INFO, "airflow_crashsafe.watchdog"):
        watchdog.run(stop, 10.0)
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("watching ")]
    assert "127.0.0.1" in line
    assert "***" in line
    assert SECRET not in line
    assert SECRET not in DbSource(url).target


def test_a_malformed_db_url_is_named_without_its_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A URL that cannot be parsed (an unclosed IPv6 bracket) exits 2 naming it, password masked."""
    url = f"postgresql://airflow:{SECRET}@[::1/airflow"
    assert cli.run(parse("--db-url", url, "--state-dir", str(tmp_path), "--once")) == 2
    err = capsys.readouterr().err
    assert "postgresql://airflow:***@[::1/airflow" in err
    assert SECRET not in err
