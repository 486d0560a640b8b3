"""``CrashsafeResumableJobMixin``: submit an external job at most once, even across a crash.

Airflow 3.3's ``ResumableJobMixin`` persists a job's id only after ``submit_job`` returns, and its
docstring names the gap: a worker that dies between the two leaves the next try nothing to
reconnect to, so it submits the job again. This mixin closes it with the ledger (docs/design.md,
"Ledger"): intent is recorded under an idempotency key *before* the submission, the key goes to
the external system with it (as the job's name or client token), and the job id is recorded
after. A retry that finds the intent without an id looks the job up by that key and resumes it;
when the system cannot be queried by key, the retry stops with :class:`OutcomeUnknown` and
submits nothing.

It keeps ``ResumableJobMixin``'s methods, so an operator built on it switches by putting this
mixin first and adding ``find_job``::

    class SparkJob(CrashsafeResumableJobMixin, BaseOperator):
        def execute(self, context):
            return self.execute_resumable(context)

        def submit_job(self, context):
            return self.hook.submit(name=self.crashsafe_key, ...)

        def find_job(self, key, context):
            return self.hook.find(name=key)  # the job id, or None if none was created

        ...  # get_job_status, is_job_active, is_job_succeeded, poll_until_complete, get_job_result

A job that ended in failure is submitted again on the next try, under the next key (a new
"generation"), as ``ResumableJobMixin`` does; a job that succeeded is never submitted again.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.effects.calls import Call, begin_call, finish_call, record_adoption, record_send
from airflow_crashsafe.errors import CrashsafeError, OutcomeUnknown
from airflow_crashsafe.identity import current_context, slot_from_context
from airflow_crashsafe.store import ledger as ledger_sql
from airflow_crashsafe.store.store import open_store

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["CrashsafeResumableJobMixin"]

log = logging.getLogger(__name__)


class CrashsafeResumableJobMixin:
    """Record intent before ``submit_job`` and the job id after; resume by key after a crash.

    :attr crashsafe_target: what the ledger calls the submission (default: the task id).
    :attr crashsafe_in_flight_wait: seconds to await an older attempt still submitting (default:
        ``[crashsafe] in_flight_wait_seconds``).
    :attr crashsafe_key: during ``submit_job``, the key to hand to the external system.
    """

    crashsafe_target: str | None = None
    crashsafe_in_flight_wait: float | None = None
    crashsafe_key: str | None = None

    if TYPE_CHECKING:
        task_id: str

    def crashsafe_job_request(self, context: Context) -> Mapping[str, Any]:
        """What is submitted, JSON-able and without secrets: a change under one key is a conflict."""
        return {"operator": type(self).__name__}

    def find_job(self, key: str, context: Context) -> Any:
        """The id of the job submitted under ``key``, or None when there is none.

        Override it when the external system can be queried by the key passed at submission; the
        default says it cannot, and a retry after a crash mid-submission then stops.
        """
        raise NotImplementedError

    @abstractmethod
    def submit_job(self, context: Context) -> Any:
        """Submit the job, passing ``self.crashsafe_key`` along; return its external id."""

    @abstractmethod
    def get_job_status(self, external_id: Any, context: Context) -> str: ...

    @abstractmethod
    def is_job_active(self, status: str) -> bool: ...

    @abstractmethod
    def is_job_succeeded(self, status: str) -> bool: ...

    @abstractmethod
    def poll_until_complete(self, external_id: Any, context: Context) -> None: ...

    @abstractmethod
    def get_job_result(self, external_id: Any, context: Context) -> Any: ...

    def execute_resumable(self, context: Context) -> Any:
        """Resume the slot's recorded job, or submit one under the ledger; then wait for it."""
        ctx = current_context(context)
        target = self.crashsafe_target or self.task_id
        store = open_store()
        with store.transaction() as db:
            generation = ledger_sql.latest_version(db, slot_from_context(ctx), target) or 1
        request = dict(self.crashsafe_job_request(context))
        while True:
            call = begin_call(
                target=target,
                request=request,
                context=ctx,
                version=generation,
                on_unknown_outcome="resend",  # resolved below by looking the job up by key
                store=store,
                in_flight_wait=self.crashsafe_in_flight_wait,
            )
            self.crashsafe_key = call.key
            if call.action == "send" and call.resend_of is None:
                external_id = self._crashsafe_submit(call, context)
                self.poll_until_complete(external_id, context)
                return self.get_job_result(external_id, context)
            external_id = self._crashsafe_recorded_job(call, context)
            if external_id is None:
                return None  # resolved by hand as succeeded: there is no job to follow
            status = self.get_job_status(external_id, context)
            if self.is_job_active(status):
                log.info("crashsafe: reconnecting to job %s (key %s), %s.", external_id, call.key, status)
                self.poll_until_complete(external_id, context)
                return self.get_job_result(external_id, context)
            if self.is_job_succeeded(status):
                log.info(
                    "crashsafe: job %s (key %s) already succeeded; not resubmitting.", external_id, call.key
                )
                return self.get_job_result(external_id, context)
            log.warning(
                "crashsafe: job %s (key %s) ended %s; submitting it again under the next key.",
                external_id,
                call.key,
                status,
            )
            generation += 1

    def _crashsafe_submit(self, call: Call, context: Context) -> Any:
        record_send(call)
        try:
            external_id = self.submit_job(context)
        except BaseException as exc:
            # The job may have been created before the error: the next try looks it up by key.
            finish_call(call, state="unknown", error=f"{type(exc).__name__}: {exc}")  # redacted, then cut
            raise
        if external_id is None:
            finish_call(call, state="unknown", error="submit_job returned no job id")
            raise CrashsafeError(
                f"{type(self).__name__}.submit_job returned no job id for key {call.key}; it must "
                "return the external id so that a retry can resume the job."
            )
        finish_call(call, state="succeeded", result={"external_id": external_id})
        return external_id

    def _crashsafe_recorded_job(self, call: Call, context: Context) -> Any:
        """The job id of a recorded submission, or of one an earlier attempt may have made."""
        if call.action == "replay":
            result = call.replayed_result
            return result.get("external_id") if isinstance(result, dict) else None
        try:
            found = self.find_job(call.key, context)
        except NotImplementedError:
            finish_call(call, state="unknown", error="submission may exist; job cannot be found by key")
            assert call.resend_of is not None
            raise OutcomeUnknown(
                f"{call.resend_of.describe_attempt()} recorded its intent to submit {call.target!r} "
                f"(key {call.key}) at {call.resend_of.intent_at} but never recorded a job id, and "
                f"{type(self).__name__} cannot look a job up by key (no find_job). Nothing was "
                "submitted now. Check the external system for a job with that key, then run "
                f"`airflow-crashsafe ledger resolve {call.key} --failed` to submit again (or "
                "`--succeeded` if it ran) and retry the task."
            ) from None
        if found is None:
            log.warning(
                "crashsafe: no job with key %s exists; %s died before submitting. Submitting now.",
                call.key,
                call.resend_of.describe_attempt() if call.resend_of else "an earlier attempt",
            )
            return self._crashsafe_submit(call, context)
        earlier = call.resend_of
        assert earlier is not None
        finish_call(call, state="succeeded", result={"external_id": found, "found_by_key": True})
        record_adoption(
            call,
            adopted_try=earlier.try_number,
            adopted_ti_id=earlier.ti_id,
            external_id=found,
            found_by="key",
        )
        log.info(
            "crashsafe: %s (key %s): adopted the work of %s, which submitted job %s but died before "
            "recording it; found it by key, nothing was submitted again.",
            call.target,
            call.key,
            earlier.describe_attempt(),
            found,
        )
        return found
