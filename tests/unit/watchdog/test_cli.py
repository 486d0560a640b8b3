"""The `watch` subcommand: configuration errors exit 2, --once polls, metrics, clean SIGTERM stop."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest
import requests

from airflow_crashsafe.watchdog import cli
from airflow_crashsafe.watchdog.state import StateFile
from tests.support.httpserver import Reply, serve

ROOT = Path(__file__).resolve().parents[3]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def healthy() -> dict[str, object]:
    now = datetime.now(timezone.utc).isoformat()
    return {
        "metadatabase": {"status": "healthy"},
        "scheduler": {"status": "healthy", "latest_scheduler_heartbeat": now},
        "triggerer": {"status": None, "latest_triggerer_heartbeat": None},
        "dag_processor": {"status": "healthy", "latest_dag_processor_heartbeat": now},
    }


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ('[[sinks]]\ntype = "teams"\n', "'type' must be one of"),
        ('[[sinks]]\ntype = "slack"\nurl_env = "CRASHSAFE_TEST_UNSET"\n', "CRASHSAFE_TEST_UNSET"),
        ("[watch]\nintervall = 5\n", "unknown [watch] option"),
        ('[watch]\ninterval = "soon"\n', "[watch] interval = 'soon' is not a number"),
        ("[watch\n", "not valid"),
        ('[watch]\ncanary_dag_id = "c"\n', "canary_max_age"),
        ('[[deadlines]]\ndag_id = "nightly"\nat = "06:00"\ntimezone = "UTC"\n', "--api-token-env"),
    ],
)
def test_bad_config_exits_2_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, needle: str
) -> None:
    """Each configuration mistake exits 2 with a message that names it."""
    path = tmp_path / "watch.toml"
    path.write_text(config)
    assert cli.run(parse("--config", str(path), "--state-dir", str(tmp_path), "--once")) == 2
    assert needle in capsys.readouterr().err


def test_missing_config_file_and_env_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing config file or an unset *_env variable exits 2."""
    assert cli.run(parse("--config", str(tmp_path / "nope.toml"), "--once")) == 2
    assert cli.run(parse("--db-url-env", "CRASHSAFE_TEST_UNSET", "--once")) == 2
    err = capsys.readouterr().err
    assert "cannot read config file" in err
    assert "CRASHSAFE_TEST_UNSET" in err


def test_once_healthy_exits_0_and_json_config_sends_to_webhook(tmp_path: Path) -> None:
    """--once against a healthy api-server exits 0; against a dead one exits 1 and delivers the alert."""
    with serve(lambda _r: Reply(200, healthy())) as airflow, serve() as hook:
        config = tmp_path / "watch.json"
        config.write_text(
            json.dumps(
                {
                    "watch": {"api_url": airflow.url, "grace": 0},
                    "sinks": [{"type": "webhook", "url": hook.url + "/h"}],
                }
            )
        )
        assert cli.run(parse("--config", str(config), "--state-dir", str(tmp_path), "--once")) == 0
        body = healthy()
        body["scheduler"] = {"status": "unhealthy", "latest_scheduler_heartbeat": None}
        airflow.answer(lambda _r: Reply(200, body))
        assert cli.run(parse("--config", str(config), "--state-dir", str(tmp_path), "--once")) == 1
    assert [r.json()["event"] for r in hook.requests] == ["trigger"]
    assert "scheduler_dead" in StateFile(tmp_path / "state.json").load()


def test_sigterm_stops_the_loop_and_metrics_are_served(tmp_path: Path) -> None:
    """The loop serves Prometheus metrics and returns 0 promptly on SIGTERM."""
    with serve(lambda _r: Reply(200, healthy())) as airflow:
        args = parse(
            "--api-url",
            airflow.url,
            "--state-dir",
            str(tmp_path),
            "--interval",
            "0.05",
            "--metrics-port",
            "0",
        )
        result: list[int] = []
        done = threading.Event()

        def ignore(*_: object) -> None:
            """Our own handler first: a SIGTERM arriving after run() returned must not kill pytest."""

        def terminate() -> None:
            # Only once run() has its own handler (its start-up may take seconds on a loaded
            # machine), then after a few polls.
            while signal.getsignal(signal.SIGTERM) is ignore and not done.wait(0.05):
                pass
            if not done.wait(0.5):
                os.kill(os.getpid(), signal.SIGTERM)

        previous = signal.signal(signal.SIGTERM, ignore)
        killer = threading.Thread(target=terminate)
        killer.start()
        try:
            result.append(cli.run(args))
        finally:
            done.set()
            killer.join()
            signal.signal(signal.SIGTERM, previous)
    assert result == [0]


def test_metrics_render_and_serve(tmp_path: Path) -> None:
    """The metrics endpoint answers the last poll through prometheus_client, with process metrics."""
    from airflow_crashsafe.watchdog.health import parse_health
    from airflow_crashsafe.watchdog.metrics import MetricsServer, Poll, render
    from airflow_crashsafe.watchdog.rules import Rules

    observation = parse_health(healthy(), datetime.now(timezone.utc))
    server = MetricsServer("127.0.0.1", 0)
    server.start()
    try:
        before = requests.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5).text
        server.update(Poll(observation, {}, Rules(), outbox_pending=2, sink_failures={'p"d': 3}))
        text = requests.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5).text
        open_metrics = requests.get(
            f"http://127.0.0.1:{server.port}/metrics",
            headers={"Accept": "application/openmetrics-text; version=1.0.0"},
            timeout=5,
        )
    finally:
        server.stop()
    assert "crashsafe_watchdog" not in before  # nothing to report before the first poll
    assert 'crashsafe_watchdog_component_alive{component="scheduler"} 1.0' in text
    assert "crashsafe_watchdog_outbox_pending 2.0" in text
    assert 'crashsafe_watchdog_sink_failures_total{sink="p\\"d"} 3.0' in text
    assert "process_resident_memory_bytes" in text
    assert open_metrics.headers["Content-Type"].startswith("application/openmetrics-text")
    assert open_metrics.text.rstrip().endswith("# EOF")
    alone = render(observation, {}, Rules(), outbox_pending=0, sink_failures={})
    assert "crashsafe_watchdog_outbox_pending 0.0" in alone
    assert "process_" not in alone


def test_metrics_port_without_prometheus_client_is_a_configuration_error(tmp_path: Path) -> None:
    """Without the prometheus extra the watchdog still runs; --metrics-port exits 2 naming the extra."""
    code = textwrap.dedent(
        f"""
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "prometheus_client":
                    raise ImportError("not installed")

        sys.meta_path.insert(0, Block())
        import argparse
        from airflow_crashsafe.watchdog import cli
        parser = argparse.ArgumentParser()
        cli.add_arguments(parser)
        argv = ["--api-url", "http://127.0.0.1:9", "--state-dir", {str(tmp_path)!r}, "--metrics-port", "0"]
        sys.exit(cli.run(parser.parse_args(argv)))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "pip install 'airflow-crashsafe[prometheus]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_corrupt_state_is_moved_aside(tmp_path: Path) -> None:
    """An unreadable state file is kept aside and the watchdog starts empty instead of dying."""
    state = tmp_path / "state.json"
    state.write_text("{not json")
    assert StateFile(state).load() == {}
    assert [p.name.startswith("state.json.corrupt-") for p in tmp_path.iterdir()] == [True]


def test_malformed_url_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An API URL that cannot be parsed (an unclosed IPv6 bracket) exits 2 naming it, not a traceback."""
    assert cli.run(parse("--api-url", "http://[::1", "--state-dir", str(tmp_path), "--once")) == 2
    assert "http://[::1" in capsys.readouterr().err
