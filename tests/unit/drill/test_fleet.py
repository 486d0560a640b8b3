"""The Celery drill's pieces without a fleet: the blackhole proxy, the fleet report, the options."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from drill.attempts import AttemptFact, TaskFact
from drill.cli import parse_args
from drill.facts import DrillFacts
from drill.fleet_report import FleetFact, invariants
from drill.proxy import BlackholeProxy
from drill.report import render
from drill.writes import DagFacts, FenceFact, WarehouseFacts

T0 = 1_796_004_634.0


@pytest.fixture
def echo() -> Iterator[int]:
    """A TCP server that echoes each connection's bytes back (the api-server stand-in)."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                while data := conn.recv(1024):
                    conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(2)
    server.close()


def _ask(port: int, timeout: float = 1.0) -> bytes | None:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(b"ping")
        try:
            return sock.recv(16)
        except TimeoutError:
            return None


def test_proxy_forwards_blackholes_and_heals(echo: int) -> None:
    """Forwarded; while blackholed a request is accepted and never answered; healed, forwarded again."""
    proxy = BlackholeProxy("127.0.0.1", echo).start()
    try:
        assert _ask(proxy.port) == b"ping"
        proxy.blackhole()
        assert _ask(proxy.port, timeout=0.5) is None
        assert proxy.dropped_connections == 1
        proxy.heal()
        assert _ask(proxy.port) == b"ping"
    finally:
        proxy.stop()


def _moved(task_id: str, hosts: tuple[str, str], zombie_end: float) -> TaskFact:
    """Try 1 on the faulted host (alive until ``zombie_end``), try 2 on the other from +30 s."""
    return TaskFact(
        task_id,
        "success",
        [
            AttemptFact(1, "failed", T0, T0 + 25, log_end=T0 + zombie_end, hostname=hosts[0]),
            AttemptFact(2, "success", T0 + 30, T0 + 90, log_end=T0 + 90, hostname=hosts[1]),
        ],
    )


def _facts(hosts: tuple[str, str] = ("worker-b", "worker-a"), rejected: int = 1) -> DrillFacts:
    task = _moved("merge_revenue_r01", hosts, zombie_end=110)
    wh = WarehouseFacts(2670.0, 2670.0, [2670.0], 40, 40, 40, 40, 40)
    fences = [FenceFact("merge_revenue_r01", "t", issued_try=2, committed_try=2, rejected_count=rejected)]
    dag = DagFacts("nightly_revenue_crashsafe", "success", [task], wh, fences, ["merge_revenue_"])
    fleet = FleetFact("partition", "worker-b", T0 + 5, T0 + 100, {"crashsafe": ["merge_revenue_r01"]})
    return DrillFacts(None, dag, T0 + 5, None, fleet=fleet)


def test_partition_report_holds_and_shows_hosts_and_overlap() -> None:
    """Moved host, zombie overlap and its refused write: no broken invariant, all in the report."""
    facts = _facts()
    assert invariants(facts) == []
    text = render(DrillFacts.from_json(facts.to_json()))
    assert text.startswith("Fleet drill (d) partition:")
    assert "merge_revenue_r01 (crashsafe): worker-b -> worker-a [success]" in text
    assert any(
        line.startswith("faulted attempt alive after re-run began") and line.endswith("1 (max 80.0 s)")
        for line in text.splitlines()
    )
    assert "its late writes refused by fence" in text


def test_a_task_rerun_on_the_faulted_host_breaks_the_fleet_invariant() -> None:
    """Both attempts on worker-b: the fault was not survived on another host."""
    assert any("not re-run on another host" in b for b in invariants(_facts(("worker-b", "worker-b"))))


def test_a_takeover_without_the_zombie_fenced_out_is_broken() -> None:
    """The successor committed, yet nothing refused the live zombie's write: reported as broken."""
    assert any("was not refused" in b for b in invariants(_facts(rejected=0)))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenario", "partition"], "add --executor celery"),
        (["--executor", "celery", "--scenario", "wedge"], "runs on LocalExecutor"),
        (["--executor", "celery", "--metadata", "sqlite"], "needs --metadata postgres"),
    ],
)
def test_bad_fleet_options_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fleet scenarios need --executor celery; celery refuses the wedge and SQLite, saying what to do."""
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_celery_defaults_run_partition_then_lost_worker() -> None:
    """--executor celery alone runs (d) then (c) on the PostgreSQL metadata DB."""
    args = parse_args(["--executor", "celery"])
    assert args.fleet_scenarios == ["partition", "lost-worker"]
    assert args.metadata == "postgres"
    assert parse_args(["--executor", "celery", "--scenario", "all"]).fleet_scenarios == [
        "one-scheduler",
        "schedulers-down",
        "partition",
        "redelivery",
        "lost-worker",
    ]
