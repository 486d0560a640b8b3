"""Fan an alert out to every sink, each on its own thread and deadline, none blocking another.

Delivery is at-least-once: :meth:`Dispatcher.enqueue` first spools one outbox entry per sink.
Each sink then has at most one worker thread, which sends that sink's due entries oldest first
and removes each from the outbox as soon as it is delivered. The outbox is locked only to read
and rewrite it, never while a sink is being waited on, so spooling a new alert never waits for a
slow sink. Every attempt has a wall-clock deadline (:attr:`Sink.deadline`): past it the attempt
is abandoned and counts as failed, however slowly the far end drips its answer. A sink that
still fails after its retries keeps its entries, which are tried again later with exponential
back-off (and, per sink, in order: a resolve never overtakes its trigger). Entries older than
``max_age`` are dropped with an error in the log, never silently.

:meth:`Dispatcher.deliver` waits for every sink (each bounded by its deadlines) and reports;
:meth:`Dispatcher.start` returns at once, for a loop that must never wait on a sink (the
watchdog); :meth:`Dispatcher.close` stops the workers at their next step within a bounded time,
leaving what was not delivered in the outbox for the next start.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from airflow_crashsafe.alerting import transport
from airflow_crashsafe.alerting.model import Alert
from airflow_crashsafe.alerting.outbox import Entry, MemoryOutbox, Outbox
from airflow_crashsafe.alerting.sinks import Sink, SinkError
from airflow_crashsafe.errors import ConfigurationError

__all__ = ["DeliveryReport", "Dispatcher"]

log = logging.getLogger(__name__)

#: How often a waiting worker looks whether it was asked to stop (s).
_STOP_POLL = 0.2


class _Stopped(Exception):
    """The dispatcher is closing: leave the entry in the outbox as it is."""


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
    :param clock, sleep: injectable for tests (``sleep`` defaults to a wait that ``close()`` cuts short).
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
        sleep: Callable[[float], object] | None = None,
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
        self._stopping = threading.Event()
        self._clock = clock
        self._sleep: Callable[[float], object] = sleep or self._stopping.wait
        self._lock = threading.Lock()  # the outbox's flock guards processes; this guards threads
        self._workers: dict[str, threading.Thread] = {}
        self.failures_total: dict[str, int] = dict.fromkeys(self.sinks, 0)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock, self.outbox.locked():
            yield

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
        with self._locked():
            self.outbox.append(entries)

    def pending(self) -> int:
        """How many deliveries wait in the outbox."""
        with self._locked():
            return len(self.outbox.load())

    def deliver(self) -> DeliveryReport:
        """Send every due entry and wait for it (each attempt bounded by its sink's deadline).

        Failures stay spooled for later; never raises for a sink failure.
        """
        report = DeliveryReport()
        for worker in self._launch(report):
            worker.join()
        report.pending = self.pending()
        return report

    def start(self) -> None:
        """Start delivering due entries in the background and return at once."""
        self._launch(DeliveryReport())

    def busy(self) -> list[str]:
        """The sinks whose worker is still sending (or waiting to retry)."""
        with self._lock:
            return sorted(name for name, worker in self._workers.items() if worker.is_alive())

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the running workers; True when none is left."""
        ends = time.monotonic() + timeout
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.join(max(0.0, ends - time.monotonic()))
        return not any(worker.is_alive() for worker in workers)

    def close(self, timeout: float = 5.0) -> bool:
        """Stop every worker at its next step, waiting at most ``timeout`` s (then abandoning it).

        Whatever was not delivered stays in the outbox; True when every worker ended in time.
        """
        self._stopping.set()
        done = self.wait(timeout)
        if not done:
            log.warning(
                "alert delivery to %s abandoned on shutdown; kept in the outbox", ", ".join(self.busy())
            )
        return done

    def _launch(self, report: DeliveryReport) -> list[threading.Thread]:
        """One worker per sink with due entries (reusing a running one); expire the too old."""
        due = self._due_sinks(report)
        workers: list[threading.Thread] = []
        with self._lock:
            for name in due:
                worker = self._workers.get(name)
                if worker is None or not worker.is_alive():
                    worker = threading.Thread(
                        target=self._drain,
                        args=(self.sinks[name], report),
                        name=f"crashsafe-sink-{name}",
                        daemon=True,  # never keeps a stopping process alive: the outbox keeps the alert
                    )
                    self._workers[name] = worker
                    worker.start()
                workers.append(worker)
        return workers

    def _due_sinks(self, report: DeliveryReport) -> list[str]:
        with self._locked():
            entries = self.outbox.load()
            now = self._clock()
            keep: list[Entry] = []
            for entry in entries:
                if now - float(entry.get("queued_at", now)) > self.max_age:
                    alert = entry["alert"]
                    log.error(
                        "giving up on alert %s for sink %r after %d attempts: %s",
                        alert.get("dedup_key"),
                        entry.get("sink"),
                        entry.get("attempts", 0),
                        entry.get("last_error"),
                    )
                    report.expired.append((entry["sink"], alert["dedup_key"], alert["event"]))
                else:
                    keep.append(entry)
            if len(keep) != len(entries):
                self.outbox.replace(keep)
        first: dict[str, Entry] = {}
        for entry in keep:
            first.setdefault(entry["sink"], entry)  # a sink no longer configured: kept until it expires
        return [
            name
            for name, entry in first.items()
            if name in self.sinks and float(entry.get("next_try_at", 0)) <= now
        ]

    def _drain(self, sink: Sink, report: DeliveryReport) -> None:
        """Send ``sink``'s entries in order until one fails, backs off, or none is left."""
        try:
            while not self._stopping.is_set():
                with self._locked():
                    queue = [e for e in self.outbox.load() if e["sink"] == sink.name]
                if not queue or float(queue[0].get("next_try_at", 0)) > self._clock():
                    return  # backing off: later entries wait behind it, in order
                entry = queue[0]
                error = self._send_with_retries(sink, Alert.from_dict(entry["alert"]))
                self._settle(sink, entry, error, report)
                if error is not None:
                    return
        except _Stopped:
            return
        except Exception:  # a bug here must not kill the watchdog; the entry stays spooled
            log.exception("delivery to sink %r failed unexpectedly", sink.name)

    def _settle(self, sink: Sink, entry: Entry, error: str | None, report: DeliveryReport) -> None:
        """Remove a delivered entry from the outbox, or record the failure and its back-off."""
        alert = entry["alert"]
        with self._locked():
            entries = self.outbox.load()
            if error is None:
                self.outbox.replace([e for e in entries if e["id"] != entry["id"]])
                report.delivered.append((sink.name, alert["dedup_key"], alert["event"]))
                return
            now = self._clock()
            attempts = int(entry.get("attempts", 0)) + 1 + sink.retries
            delay = min(self.max_backoff, self.retry_delay * 2 ** min(attempts, 30))
            changes = {"attempts": attempts, "last_error": error, "next_try_at": now + delay}
            self.outbox.replace([{**e, **changes} if e["id"] == entry["id"] else e for e in entries])
            report.failed.append((sink.name, alert["dedup_key"], alert["event"], error))
            self.failures_total[sink.name] = self.failures_total.get(sink.name, 0) + 1
        log.warning(
            "sink %r could not deliver alert %s (%s): %s; kept in the outbox, next try in %.0f s",
            sink.name,
            alert["dedup_key"],
            alert["event"],
            error,
            delay,
        )

    def _send_with_retries(self, sink: Sink, alert: Alert) -> str | None:
        error: str | None = None
        for attempt in range(1 + max(0, sink.retries)):
            if attempt:
                self._sleep(min(self.retry_delay * 2 ** (attempt - 1), 30.0))
            if self._stopping.is_set():
                raise _Stopped
            error = self._attempt(sink, alert)
            if error is None:
                log.info("delivered alert %s (%s) to sink %r", alert.dedup_key, alert.event, sink.name)
                return None
        return error

    def _attempt(self, sink: Sink, alert: Alert) -> str | None:
        """One ``sink.send`` on a thread of its own, abandoned (its connections cut) if it outlives
        ``sink.deadline``."""
        outcome: list[str | None] = []

        def send() -> None:
            try:
                sink.send(alert)
            except SinkError as exc:
                outcome.append(str(exc))
            except Exception as exc:  # a sink bug must not take the others down
                # Only the type: an unexpected message may carry a URL with its token.
                outcome.append(f"unexpected {type(exc).__name__} in sink {sink.name!r}")
                log.error("sink %r raised unexpectedly: %s", sink.name, type(exc).__name__)
            else:
                outcome.append(None)
            finally:
                transport.forget()

        thread = threading.Thread(target=send, name=f"crashsafe-send-{sink.name}", daemon=True)
        ends = time.monotonic() + sink.deadline
        thread.start()
        while thread.is_alive():
            remaining = ends - time.monotonic()
            if remaining <= 0:
                transport.cut(thread.ident)  # wake the abandoned thread: it must not linger
                return f"no complete answer within the {sink.deadline:g} s deadline: attempt abandoned"
            if self._stopping.is_set():
                transport.cut(thread.ident)
                raise _Stopped
            thread.join(min(remaining, _STOP_POLL))
        return outcome[0] if outcome else f"sink {sink.name!r} ended without a result"
