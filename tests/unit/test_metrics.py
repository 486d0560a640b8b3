"""crashsafe's metrics: declared names only, through Airflow's Stats, never failing the caller."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_crashsafe import metrics
from airflow_crashsafe.testing.metrics import record_metrics

DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def test_sent_through_airflow_stats_with_tags() -> None:
    """A counter, a gauge and a timer reach Airflow's configured backend with their tags."""
    with record_metrics() as sent:
        metrics.incr("crashsafe.fence.rejected", tags={"dag_id": "d", "stage": "commit"})
        metrics.gauge("crashsafe.audit.spool_depth", 3)
        with metrics.timed("crashsafe.fence.write", tags={"dag_id": "d"}):
            pass
    assert [(s.kind, s.name, s.tags) for s in sent.sent] == [
        ("incr", "crashsafe.fence.rejected", {"dag_id": "d", "stage": "commit"}),
        ("gauge", "crashsafe.audit.spool_depth", {}),
        ("timing", "crashsafe.fence.write", {"dag_id": "d"}),
    ]
    assert sent.sent[1].value == 3


def test_a_block_that_raises_is_not_timed() -> None:
    """A deferral or an error is not a write: the timer sends nothing."""
    with record_metrics() as sent, pytest.raises(RuntimeError), metrics.timed("crashsafe.fence.write"):
        raise RuntimeError("deferred")
    assert sent.sent == []


def test_an_undeclared_name_is_a_programming_error() -> None:
    """Only names listed in METRICS (and documented) can be sent."""
    with pytest.raises(ValueError, match="not a crashsafe metric"):
        metrics.incr("crashsafe.typo")


def test_a_failing_backend_never_fails_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """A metrics backend that raises is logged and ignored."""
    from airflow.sdk.observability.stats import Stats

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("statsd host unreachable")

    monkeypatch.setattr(Stats, "incr", broken)
    metrics.incr("crashsafe.fence.committed")


def test_every_metric_is_documented() -> None:
    """docs/observability.md lists exactly the metrics crashsafe sends."""
    documented = set(re.findall(r"`(crashsafe\.[a-z_.]+)`", DOCS.read_text()))
    assert documented == set(metrics.METRICS)
