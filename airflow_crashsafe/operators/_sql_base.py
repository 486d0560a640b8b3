"""What every fenced SQL operator shares: its arguments, the write path, deferral and ``on_kill``.

A private module: the operators are public in :mod:`airflow_crashsafe.operators.sql`. The
protocol itself is :func:`airflow_crashsafe.fencing.decision.decide`; the statements are the
operator's write plan (:mod:`airflow_crashsafe.sql.plans`); the dialect's runner writes them
(:mod:`airflow_crashsafe.fencing.runners`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason

from airflow_crashsafe import config, metrics
from airflow_crashsafe.admission.operator import AdmissionResume, RecoveryAdmissionMixin
from airflow_crashsafe.admission.rules import Deadline
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.fencing.decision import Adoption, Resume, Run, Wait, decide
from airflow_crashsafe.fencing.runners import Runner, runner_for
from airflow_crashsafe.fencing.triggerer import await_unit, check_without_triggerer
from airflow_crashsafe.identity import attempt_from_context, current_context, slot_from_context
from airflow_crashsafe.operators.lineage import SQLLineageMixin
from airflow_crashsafe.store.dbapi import connect_target
from airflow_crashsafe.store.dialects import say_limits
from airflow_crashsafe.triggers.unit import UnitEndTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_crashsafe.sql.plans import WritePlan

__all__ = ["ON_KILL_CHOICES", "FencedSQLBase"]

ON_KILL_CHOICES = ("leave", "cancel")
_TRIGGER_TIMEOUT = TriggerFailureReason.TRIGGER_TIMEOUT.value


class FencedSQLBase(SQLLineageMixin, RecoveryAdmissionMixin, BaseOperator):
    """A fenced write to ``conn_id``: decide, then run the operator's plan, once per slot.

    On PostgreSQL the write runs as one server-side unit that commits even if this process is
    killed, and a reset re-run that finds its predecessor's unit still in flight waits for it and
    adopts that unit's commit instead of redoing the work (docs/design.md, "Server-side unit and
    adoption"): deferred while a triggerer heartbeats, else as ``adoption_without_triggerer``
    says. On SQLite the write is a client-driven fenced transaction.

    :param adopt_in_flight: wait for and adopt a predecessor's in-flight unit (PostgreSQL).
    :param adoption_timeout: how long to wait for it before cancelling it and taking over.
    :param adoption_without_triggerer: with no triggerer heartbeating, ``"wait"`` for the unit in
        the worker (holding its slot) or ``"take_over"`` (cancel it and redo the work).
    :param on_kill_unit: ``"leave"`` (a SIGTERMed attempt's unit keeps running, to be adopted) or
        ``"cancel"`` (cancel it, as a client-driven transaction would be).
    :param recovery_concurrency: recovery budget of the resource (docs/design.md, "Recovery
        admission"); default ``[crashsafe] recovery_concurrency``; 0: a re-run never waits.
    :param recovery_resource: name of the budget, to share one across connections (default ``conn_id``).
    :param deadline: when the run must be done (datetime, time of day or ISO text): a re-run with
        less slack is admitted first.
    """

    conn_id_field = "conn_id"
    template_ext: Sequence[str] = (".sql",)
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "sql": "sql",
        "parameters": "json",
        "partition": "json",
    }
    ui_color = "#e8f0fe"
    # Set only while a write runs, so that on_kill() (another thread or a signal) can cancel it.
    _crashsafe_runner: Runner | None = None

    def __init__(
        self,
        *,
        conn_id: str,
        slot_partition: str | None = None,
        adopt_in_flight: bool | None = None,
        adoption_timeout: timedelta | float | None = None,
        on_kill_unit: str | None = None,
        adoption_without_triggerer: str | None = None,
        recovery_concurrency: int | None = None,
        recovery_resource: str | None = None,
        deadline: Deadline | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if on_kill_unit is not None and on_kill_unit not in ON_KILL_CHOICES:
            raise ConfigurationError(
                f"on_kill_unit={on_kill_unit!r} of {kwargs.get('task_id')!r}: "
                f"choose one of {ON_KILL_CHOICES}."
            )
        self.conn_id = conn_id
        self.slot_partition = slot_partition
        # None: the [crashsafe] option, read where the task runs (not where the DAG is parsed).
        self.adopt_in_flight = adopt_in_flight
        self.adoption_timeout = adoption_timeout
        self.on_kill_unit = on_kill_unit
        self.adoption_without_triggerer = check_without_triggerer(
            adoption_without_triggerer, kwargs.get("task_id")
        )
        self.recovery_concurrency = recovery_concurrency
        self.recovery_resource = recovery_resource
        self.deadline = deadline

    def write_plan(self) -> WritePlan[Any]:
        """What this operator writes, its arguments validated (before any connection opens)."""
        raise NotImplementedError

    def execute(self, context: Context) -> dict[str, Any]:
        """Write once per slot; the result says what was written, skipped or adopted."""
        return self._write(context, Resume())

    def execute_admitted(self, context: Context, admission: AdmissionResume | None) -> dict[str, Any]:
        """``execute`` back from a wait for a recovery place, which ``admission`` claims."""
        return self._write(context, Resume(), admission)

    def resume_after_unit(
        self,
        context: Context,
        awaited: Mapping[str, Any],
        deadline: float,
        event: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Back from the triggerer: the awaited unit ended (adopt or redo) or the wait timed out."""
        return self._write(context, Resume.after_trigger(awaited, deadline, event))

    def _write(
        self, context: Context, resume: Resume, admission: AdmissionResume | None = None
    ) -> dict[str, Any]:
        """Check the target, ``decide``, then defer, run the plan, or return the skip/adoption.

        :param admission: the recovery place won while deferred, if this resumes such a wait.
        """
        plan = self.write_plan()
        ctx = current_context(context)
        slot, attempt = slot_from_context(ctx, self.slot_partition), attempt_from_context(ctx)
        db = connect_target(self.conn_id)
        runner = self._crashsafe_runner = runner_for(db)
        try:
            say_limits(db, self.log)  # what this database cannot guarantee, before anything runs
            prepared = plan.prepare(db)  # read-only checks, before any token
            db.rollback()  # end the read-only catalog transaction before the fence starts its own
            adoption = Adoption(self._adopts(), self._adoption_timeout_seconds())
            decision = decide(
                db, slot, plan.target, attempt, resume, adoption, in_flight_units=runner.in_flight_units
            )
            if isinstance(decision, Wait):
                db.close()  # hold no connection while waiting
                return self._write(context, self._await_unit(decision, resume.triggerer_silent), admission)
            if isinstance(decision, Run):
                with (
                    self.recovery_place(ctx, admission),
                    metrics.timed("crashsafe.fence.write", tags=metrics.slot_tags(slot)),
                ):  # a recovery re-run may defer here for a place
                    return runner.run(decision, plan, prepared)
            return decision.result
        finally:
            self._crashsafe_runner = None
            db.close()

    def _await_unit(self, wait: Wait, triggerer_silent: bool) -> Resume:
        """Defer while a triggerer heartbeats (and answered); else wait here or take over (logged)."""

        def defer(trigger: UnitEndTrigger, kwargs: dict[str, Any], timeout: timedelta) -> None:
            self.defer(trigger=trigger, method_name="resume_after_unit", kwargs=kwargs, timeout=timeout)

        policy = self.adoption_without_triggerer or config.adoption_without_triggerer()
        return await_unit(
            wait,
            conn_id=self.conn_id,
            without_triggerer=policy,
            defer=defer,
            triggerer_silent=triggerer_silent,
        )

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """A deferral that timed out (no triggerer ran the trigger: stalled) does not fail the task:
        the wait goes on without the triggerer, in the worker or by taking over, as
        ``adoption_without_triggerer`` says; past the adoption time it takes the slot over."""
        if next_method == TRIGGER_FAIL_REPR and (next_kwargs or {}).get("error") == _TRIGGER_TIMEOUT:
            self.log.warning(
                "crashsafe: the triggerer did not answer the wait for the in-flight unit in time "
                "(it heartbeats but runs no trigger?); going on without it."
            )
            return self._write(context, Resume(triggerer_silent=True), AdmissionResume.unanswered())
        return super().resume_execution(next_method, next_kwargs, context)

    def default_recovery_resource(self) -> str:
        return self.conn_id

    def on_kill(self) -> None:
        """Leave a running server-side unit to finish (default) or cancel what is running."""
        runner = self._crashsafe_runner
        if runner is not None:
            runner.on_kill(self.task_id, leave_unit=runner.unit_running and self._leaves_unit_on_kill())

    def _adopts(self) -> bool:
        return config.adopt_in_flight() if self.adopt_in_flight is None else bool(self.adopt_in_flight)

    def _adoption_timeout_seconds(self) -> float:
        timeout = self.adoption_timeout
        if timeout is None:
            return config.adoption_timeout_seconds()
        return timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)

    def _leaves_unit_on_kill(self) -> bool:
        policy = config.on_kill_unit() if self.on_kill_unit is None else self.on_kill_unit
        return policy == "leave"
