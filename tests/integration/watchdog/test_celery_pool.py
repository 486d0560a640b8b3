"""The watchdog's view of a real Celery worker pool on a throwaway redis-server broker."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_crashsafe.watchdog.celery_workers import CeleryQueues
from drill.redis_broker import RedisBroker, find_redis_server

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisBroker]:
    """A redis-server of the test's own."""
    if find_redis_server() is None:
        pytest.skip("redis-server is not installed")
    server = RedisBroker(root=tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop()


def _worker(broker: RedisBroker, tmp_path: Path, queues: str) -> subprocess.Popen[bytes]:
    (tmp_path / "pool_app.py").write_text(
        f"from celery import Celery\napp = Celery('pool', broker={broker.url(0)!r})\n"
    )
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "celery", "-A", "pool_app", "worker", "-Q", queues, "-n", "w1@pool-host"),
            *("--pool", "solo", "--without-mingle", "--without-gossip", "--loglevel", "WARNING"),
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_live_workers_queues_are_seen_and_a_dead_pool_is_empty(broker: RedisBroker, tmp_path: Path) -> None:
    """A worker consuming default and host-b is listed under both; once it is killed, nobody is."""
    pool = CeleryQueues(broker.url(0), timeout=2.0)
    assert pool.consumers() == {}
    worker = _worker(broker, tmp_path, "default,host-b")
    try:
        deadline = time.monotonic() + 60
        found: dict[str, tuple[str, ...]] = {}
        while time.monotonic() < deadline and not found:
            found = pool.consumers()
        assert found == {"default": ("w1@pool-host",), "host-b": ("w1@pool-host",)}
    finally:
        worker.kill()
        worker.wait(timeout=10)
    assert pool.consumers() == {}
    pool.close()
