"""Fan an alert out to every sink, each with its own timeout and retries, none blocking another.

Delivery is at-least-once: :meth:`Dispatcher.submit` first spools one outbox entry per sink,
then :meth:`Dispatcher.deliver` sends every due entry, one thread per sink, oldest first. A sink
that still fails after its retries keeps its entries, which are tried again on a later
``deliver()`` with exponential back-off (and, per sink, in order: a resolve never overtakes its
trigger). Entries older than ``max_age`` are dropped with an error in the log, never silently.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from airflow_crashsafe.alerting.model import Alert
from airflow_crashsafe.alerting.outbox import Entry, MemoryOutbox, Outbox
from airflow_crashsafe.alerting.sinks import Sink, SinkError
from airflow_crashsafe.errors import ConfigurationError

__all__ = ["DeliveryReport", "Dispatcher"]

log = logging.getLogger(__name__)


@dataclass
class DeliveryReport:
    """What one :meth:`Dispatcher.deliver` did: ``(sink, dedup_key, event[, error])`` tuples."""

    delivered: list[tuple[str, str, str]] = field(default_factory=list)
    failed: list[tuple[str, str, str, str]] = field(default_factory=list)
    expired: list[tuple[str, str, str]] = field(default_factory=list)
    pending: int = 0


class Dispatcher:
    """Deliver alerts to ``sinks`` through ``outbox`` (in memory unless a file outbox is given).

    :param retry_delay: first pause between immediate retries and first outbox back-off (s).
    :param max_backoff: cap of the outbox back-off between later attempts (s).
    :param max_age: give up on an entry this many seconds after it was first queued.
    :param clock, sleep: injectable for tests.
    """

    def __init__(
        self,
        sinks: Sequence[Sink],
        *,
        outbox: Outbox | None = None,
        retry_delay: float = 1.0,
        max_backoff: float = 600.0,
        max_age: float = 7 * 86400.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        names = [s.name for s in sinks]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigurationError(
                f"sink names must be unique; repeated: {', '.join(duplicates)}: give each sink its own name"
            )
        self.sinks = {s.name: s for s in sinks}
        self.outbox = outbox if outbox is not None else MemoryOutbox()
        self.retry_delay, self.max_backoff, self.max_age = retry_delay, max_backoff, max_age
        self._clock, self._sleep = clock, sleep
        self.failures_total: dict[str, int] = dict.fromkeys(self.sinks, 0)

    def submit(self, alert: Alert) -> DeliveryReport:
        """Spool ``alert`` for every sink that accepts it, then deliver what is due."""
        self.enqueue(alert)
        return self.deliver()

    def enqueue(self, alert: Alert) -> None:
        """Spool ``alert`` for every sink that accepts it, without sending anything yet."""
        log.log(
            logging.INFO if alert.event == "resolve" else logging.WARNING,
            "alert %s: %s",
            alert.event,
            alert.title,
        )
        now = self._clock()
        entries = [
            {
                "id": uuid.uuid4().hex,
                "sink": sink.name,
                "alert": alert.to_dict(),
                "attempts": 0,
                "queued_at": now,
                "next_try_at": now,
                "last_error": None,
            }
            for sink in self.sinks.values()
            if sink.accepts(alert)
        ]
        with self.outbox.locked():
            self.outbox.append(entries)

    def pending(self) -> int:
        """How many deliveries wait in the outbox."""
        with self.outbox.locked():
            return len(self.outbox.load())

    def deliver(self) -> DeliveryReport:
        """Try every due entry now; keep the failures for later. Never raises for a sink failure."""
        report = DeliveryReport()
        with self.outbox.locked():
            entries = self.outbox.load()
            now = self._clock()
            keep: list[Entry] = []
            by_sink: dict[str, list[Entry]] = {}
            for entry in entries:
                if now - float(entry.get("queued_at", now)) > self.max_age:
                    log.error(
                        "giving up on alert %s for sink %r after %d attempts: %s",
                        entry["alert"].get("dedup_key"),
                        entry.get("sink"),
                        entry.get("attempts", 0),
                        entry.get("last_error"),
                    )
                    alert = entry["alert"]
                    report.expired.append((entry["sink"], alert["dedup_key"], alert["event"]))
                    continue
                by_sink.setdefault(str(entry.get("sink")), []).append(entry)
            work = {name: queue for name, queue in by_sink.items() if name in self.sinks}
            for name, queue in by_sink.items():
                if name not in self.sinks:
                    keep.extend(queue)  # a sink no longer configured: kept until it expires
            if work:
                with ThreadPoolExecutor(max_workers=len(work), thread_name_prefix="crashsafe-sink") as pool:
                    futures = {
                        name: pool.submit(self._drain, self.sinks[name], queue, now)
                        for name, queue in work.items()
                    }
                results = {name: future.result() for name, future in futures.items()}
                for name, queue in work.items():
                    done, error = results[name]
                    for entry in queue[:done]:
                        report.delivered.append((name, entry["alert"]["dedup_key"], entry["alert"]["event"]))
                    rest = queue[done:]
                    if error is not None and rest:
                        failed = rest[0]
                        report.failed.append(
                            (name, failed["alert"]["dedup_key"], failed["alert"]["event"], error)
                        )
                        self.failures_total[name] = self.failures_total.get(name, 0) + 1
                    keep.extend(rest)
            self.outbox.replace(keep)
            report.pending = len(keep)
        return report

    def _drain(self, sink: Sink, queue: list[Entry], now: float) -> tuple[int, str | None]:
        """Send ``queue`` in order; return how many were delivered and the error that stopped it."""
        for index, entry in enumerate(queue):
            if float(entry.get("next_try_at", 0)) > now:
                return index, None  # backing off: later entries wait behind it, in order
            error = self._send_with_retries(sink, Alert.from_dict(entry["alert"]))
            if error is not None:
                entry["attempts"] = int(entry.get("attempts", 0)) + 1 + sink.retries
                entry["last_error"] = error
                delay = min(self.max_backoff, self.retry_delay * 2 ** min(int(entry["attempts"]), 30))
                entry["next_try_at"] = now + delay
                log.warning(
                    "sink %r could not deliver alert %s (%s): %s; kept in the outbox, next try in %.0f s",
                    sink.name,
                    entry["alert"]["dedup_key"],
                    entry["alert"]["event"],
                    error,
                    delay,
                )
                return index, error
        return len(queue), None

    def _send_with_retries(self, sink: Sink, alert: Alert) -> str | None:
        error: str | None = None
        for attempt in range(1 + max(0, sink.retries)):
            if attempt:
                self._sleep(min(self.retry_delay * 2 ** (attempt - 1), 30.0))
            try:
                sink.send(alert)
            except SinkError as exc:
                error = str(exc)
            except Exception as exc:  # a sink bug must not take the others down
                # Only the type: an unexpected message may carry a URL with its token.
                error = f"unexpected {type(exc).__name__} in sink {sink.name!r}"
                log.error("sink %r raised unexpectedly: %s", sink.name, type(exc).__name__)
            else:
                log.info("delivered alert %s (%s) to sink %r", alert.dedup_key, alert.event, sink.name)
                return None
        return error
