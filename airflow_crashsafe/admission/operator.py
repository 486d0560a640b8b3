"""Recovery admission for the crashsafe operators: ask before the work, wait deferred while it is full.

An operator mixes in :class:`RecoveryAdmissionMixin`, implements :meth:`~RecoveryAdmissionMixin.
execute_admitted` (its ``execute`` with an :class:`AdmissionResume` argument) and wraps its work in
``with self.recovery_place(context, admission):``. A recovery re-run whose budget is full leaves its
waiting row in the store and defers to
:class:`~airflow_crashsafe.triggers.admission.RecoveryAdmissionTrigger` (no worker slot held while
it waits); resumed, it runs ``execute_admitted`` with what the trigger won for it, as a frozen
value passed down to ``recovery_place`` (no state on the operator), which claims the place. See
docs/design.md, "Recovery admission".
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from airflow_crashsafe import config
from airflow_crashsafe.admission.lease import Lease, poll, release, take
from airflow_crashsafe.admission.rules import Deadline
from airflow_crashsafe.admission.worker import Asking, admitted, prepare, wait_for_place
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.fencing.triggerer import triggerer_health
from airflow_crashsafe.identity import current_context
from airflow_crashsafe.store import admission as sql
from airflow_crashsafe.triggers.admission import RecoveryAdmissionTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["UNANSWERED", "AdmissionResume", "RecoveryAdmissionMixin"]

log = logging.getLogger(__name__)
#: The method a deferral for a recovery place resumes in.
RESUME_METHOD = "resume_after_admission"
#: :attr:`AdmissionResume.status` of a deferral the triggerer never answered (Airflow timed it out).
UNANSWERED = "unanswered"


@dataclass(frozen=True)
class AdmissionResume:
    """What a re-run deferred for a recovery place brings back from the triggerer.

    :ivar holder: its row in the admission table (waiting, or admitted while it was deferred).
    :ivar arrived: UNIX time it first asked (its rank and the total wait start there).
    :ivar status: the trigger's verdict: ``admitted``, ``timeout``, ``unanswered`` (Airflow timed the
        deferral out: the triggerer heartbeats but ran no trigger), or None (no event).
    :ivar place: the place won, when admitted.
    """

    holder: int
    arrived: float
    status: str | None = None
    place: int | None = None

    @classmethod
    def unanswered(cls) -> AdmissionResume:
        """The deferral timed out unanswered: its waiting row died with it (holder 0: no row)."""
        return cls(holder=0, arrived=time.time(), status=UNANSWERED)

    @classmethod
    def after_trigger(cls, admission: Mapping[str, Any], event: Mapping[str, Any] | None) -> AdmissionResume:
        """From the kwargs of the deferral and the trigger's event payload."""
        merged = {**admission, **(event or {})}
        place = merged.get("place")
        return cls(
            holder=int(merged["holder"]),
            arrived=float(merged["arrived"]),
            status=merged.get("status"),
            place=None if place is None else int(place),
        )


class RecoveryAdmissionMixin:
    """What an operator needs for recovery admission (its ``__init__`` sets the three arguments).

    :ivar recovery_concurrency: the budget; None: ``[crashsafe] recovery_concurrency``; 0: off.
    :ivar recovery_resource: the budget's name; None: the operator's connection id.
    :ivar deadline: when the run must be done (datetime, time of day or ISO text); sooner goes first.
    """

    recovery_concurrency: int | None = None
    recovery_resource: str | None = None
    deadline: Deadline | None = None

    def default_recovery_resource(self) -> str:
        """The resource when ``recovery_resource`` is not given (the operator's connection id)."""
        raise NotImplementedError

    def execute_admitted(self, context: Context, admission: AdmissionResume | None) -> Any:
        """``execute``, handing ``admission`` (None on a first call) to :meth:`recovery_place`."""
        raise NotImplementedError

    if TYPE_CHECKING:  # provided by BaseOperator

        def defer(self, **kwargs: Any) -> NoReturn: ...

        def execute(self, context: Context) -> Any: ...

    @contextmanager
    def recovery_place(
        self, context: Context | Mapping[str, Any], admission: AdmissionResume | None = None
    ) -> Iterator[Lease | None]:
        """Hold a recovery place for the block if this is a recovery re-run (may defer instead).

        :param admission: what the deferral for a place brought back (None: ask afresh).
        """
        lease = self._admit(context, admission)
        try:
            yield lease
        finally:
            if lease is not None:
                lease.release()

    def resume_after_admission(
        self, context: Context, admission: Mapping[str, Any], event: Mapping[str, Any] | None = None
    ) -> Any:
        """Back from the triggerer with a place (or a timeout): run the work again, which claims it.

        The row is given back afterwards unless the work deferred for a place again (then it waits
        on): a place the work held its lease on is already gone (deleting it again is a no-op), and
        one it did not need (e.g. committed meanwhile, or deferred to adopt a unit) is freed.
        """
        from airflow.sdk.exceptions import TaskDeferred

        resumed = AdmissionResume.after_trigger(admission, event)
        try:
            return self.execute_admitted(context, resumed)
        except TaskDeferred as deferred:
            if deferred.method_name != RESUME_METHOD:
                self._give_back(resumed.holder)
            raise
        except BaseException:
            self._give_back(resumed.holder)
            raise
        else:
            self._give_back(resumed.holder)

    def _give_back(self, holder: int) -> None:
        from airflow_crashsafe.store.store import open_store

        try:
            release(open_store(), holder)
        except Exception as exc:  # the row then dies with its beacon
            log.warning("crashsafe: releasing recovery place %s failed (%s)", holder, exc)

    def _admit(self, context: Context | Mapping[str, Any], resumed: AdmissionResume | None) -> Lease | None:
        resource = self.recovery_resource or self.default_recovery_resource()
        try:
            asking = prepare(
                resource,
                current_context(context),
                concurrency=self.recovery_concurrency,
                deadline=self.deadline,
                store=None,
            )
            if asking is None:
                if resumed is not None:  # admission was turned off meanwhile: free the row now
                    self._give_back(resumed.holder)
                return None
            if resumed is not None and resumed.status != UNANSWERED:
                outcome = self._after_trigger(asking, resumed)
            else:
                outcome = self._first_ask(asking)
                if isinstance(outcome, tuple):
                    # A deferral would never resume, or the last one was never answered: wait here.
                    why = "the triggerer did not answer the last wait (it heartbeats but runs no trigger?)"
                    if resumed is None:
                        health = triggerer_health()
                        why = "" if health.alive else f"no live triggerer ({health.reason})"
                    if why:
                        release(asking.store, outcome[0])
                        log.warning("crashsafe: %s; waiting for a recovery place in the worker.", why)
                        return wait_for_place(asking, config.recovery_wait_seconds())
            if isinstance(outcome, tuple):
                self._hand_off(asking, outcome[0])
        except ConfigurationError:
            raise
        except Exception as exc:  # admission damps load; a store outage must not stop the work
            log.warning("crashsafe: recovery admission unavailable (%s); going ahead without a place.", exc)
            return None
        if isinstance(outcome, tuple):
            self._defer_for_place(asking, *outcome)
        return outcome

    def _first_ask(self, asking: Asking) -> Lease | tuple[int, float]:
        ticket = take(asking.store, asking.request, asking.k, hostname=socket.gethostname(), pid=os.getpid())
        if ticket.place is not None:
            return admitted(asking, ticket.holder, ticket.place, 0.0)
        return ticket.holder, time.time()

    def _after_trigger(self, asking: Asking, resumed: AdmissionResume) -> Lease | tuple[int, float] | None:
        holder, arrived, status = resumed.holder, resumed.arrived, resumed.status
        me, pid = socket.gethostname(), os.getpid()
        if status == "timeout":
            release(asking.store, holder)
            log.warning(
                "crashsafe: no recovery place for resource %r within %.0f s; going ahead over the budget.",
                asking.request.resource,
                time.time() - arrived,
            )
            return None
        with asking.store.transaction() as db:
            claimed = status == "admitted" and sql.claim(db, holder, hostname=me, pid=pid)
            # The place went stale before this task resumed, or the row was lost: ask again, same rank.
            requeued = claimed or sql.requeue(db, holder, hostname=me, pid=pid)
        if claimed and resumed.place is not None:
            return admitted(asking, holder, resumed.place, time.time() - arrived)
        if not requeued:
            holder = take(asking.store, asking.request, asking.k, hostname=me, pid=pid).holder
        try:
            place = poll(asking.store, holder, asking.request.resource, asking.k, hostname=me, pid=pid)
        except LookupError:
            place = None
        if place is not None:
            return admitted(asking, holder, place, time.time() - arrived)
        return holder, arrived

    def _hand_off(self, asking: Asking, holder: int) -> None:
        """Give the waiting row to the trigger; a failure frees it (best effort) and is raised.

        Runs inside :meth:`_admit`'s fail-open guard: a row the trigger cannot own must not fail the
        task, and one left waiting under this live pid could later be admitted to nobody.
        """
        try:
            with asking.store.transaction() as db:
                sql.hand_off(db, holder)
        except Exception:
            with suppress(Exception):  # the store is failing: the row may outlive us
                release(asking.store, holder)
            raise

    def _defer_for_place(self, asking: Asking, holder: int, arrived: float) -> NoReturn:
        log.info(
            "crashsafe: waiting for a recovery place for resource %r (budget %d; %s); deferring.",
            asking.request.resource,
            asking.k,
            asking.verdict.reason,
        )
        self.defer(
            trigger=RecoveryAdmissionTrigger(
                holder=holder,
                resource=asking.request.resource,
                k=asking.k,
                give_up_at=arrived + config.recovery_wait_seconds(),
            ),
            method_name=RESUME_METHOD,
            kwargs={"admission": {"holder": holder, "arrived": arrived}},
            # The trigger answers by give_up_at; a triggerer that never answers is timed out by
            # Airflow, and the re-run resumes with AdmissionResume.unanswered() to wait in the worker.
            timeout=timedelta(seconds=config.recovery_wait_seconds() + config.triggerer_answer_seconds()),
        )
