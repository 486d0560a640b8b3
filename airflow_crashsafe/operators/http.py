"""``IdempotentHttpOperator``: an HTTP call that a crashed, reset or retried task never sends twice.

Intent is recorded in the crashsafe ledger before the request leaves and the outcome after; the
request carries an idempotency key derived from the slot and target, the same in every attempt.
A retry of a recorded success sends nothing and returns the recorded result.
"""

from __future__ import annotations

import json as jsonlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from airflow_crashsafe.admission.operator import RecoveryAdmissionMixin
from airflow_crashsafe.admission.rules import Deadline
from airflow_crashsafe.effects.calls import Call, UnknownOutcomePolicy, begin_call, finish_call, record_send
from airflow_crashsafe.effects.http_policy import MAX_BACKOFF_SECONDS, backoff_seconds, classify, redact
from airflow_crashsafe.errors import ConfigurationError, ExternalCallFailed, IdempotencyConflict

if TYPE_CHECKING:
    import requests
    from airflow.sdk import Context

__all__ = ["IdempotentHttpOperator"]

_ALWAYS_REDACTED = frozenset({"authorization", "password", "api_key", "apikey", "token", "secret"})


class IdempotentHttpOperator(RecoveryAdmissionMixin, BaseOperator):
    """Call an HTTP endpoint at most once per slot, with an idempotency key and a ledger.

    :param http_conn_id: Airflow HTTP connection (base URL and auth).
    :param endpoint: path appended to the connection's base URL.
    :param method: HTTP method.
    :param json: JSON body. :param data: form or raw body (use one of the two).
    :param headers: extra headers (never stored or logged).
    :param target: what is called, for the key; defaults to the task id.
    :param key_header: header carrying the idempotency key.
    :param on_unknown_outcome: when an earlier attempt may have sent the call: ``"resend"`` with
        the same key (the target honours keys) or ``"fail"`` without sending.
    :param response_check: ``callable(response) -> bool``; False fails the call for good.
    :param redact_fields: body fields never written to the store, logs or XCom.
    :param version: bump to send again on purpose under a new key.
    :param max_sends: requests at most per attempt on 5xx / timeouts / connection errors.
    :param in_progress_wait: seconds to keep asking while the target answers 409.
    :param in_flight_wait: seconds to await an older attempt whose call the ledger shows in flight,
        to adopt its result; default ``[crashsafe] in_flight_wait_seconds``.
    :param timeout: seconds per request.
    :param backoff_base: first backoff ceiling in seconds (doubling, capped at 30 s, full jitter).
    :param recovery_concurrency: recovery budget of the resource (docs/design.md, "Recovery
        admission"); default ``[crashsafe] recovery_concurrency``; 0: a re-run never waits.
    :param recovery_resource: name of the budget, to share one across connections (default
        ``http_conn_id``).
    :param deadline: when the run must be done (datetime, time of day or ISO text): a re-run with
        less slack is admitted first.
    """

    template_fields: Sequence[str] = ("endpoint", "json", "data", "headers", "target", "slot_partition")
    template_fields_renderers: ClassVar[dict[str, str]] = {"json": "json", "data": "py", "headers": "json"}

    def __init__(
        self,
        *,
        http_conn_id: str,
        endpoint: str,
        method: str = "POST",
        json: Any = None,
        data: Any = None,
        headers: Mapping[str, str] | None = None,
        target: str | None = None,
        key_header: str = "Idempotency-Key",
        on_unknown_outcome: UnknownOutcomePolicy = "resend",
        response_check: Callable[[requests.Response], bool] | None = None,
        redact_fields: Sequence[str] = (),
        version: int = 1,
        max_sends: int = 5,
        in_progress_wait: float = 60.0,
        in_flight_wait: float | None = None,
        timeout: float = 30.0,
        backoff_base: float = 0.5,
        slot_partition: str | None = None,
        recovery_concurrency: int | None = None,
        recovery_resource: str | None = None,
        deadline: Deadline | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.http_conn_id = http_conn_id
        self.endpoint = endpoint
        self.method = method
        self.json = json
        self.data = data
        self.headers = headers
        self.target = target
        self.key_header = key_header
        self.on_unknown_outcome = on_unknown_outcome
        self.response_check = response_check
        self.redact_fields = tuple(redact_fields)
        self.version = version
        self.max_sends = max_sends
        self.in_progress_wait = in_progress_wait
        self.in_flight_wait = in_flight_wait
        self.timeout = timeout
        self.backoff_base = backoff_base
        self.slot_partition = slot_partition
        self.recovery_concurrency = recovery_concurrency
        self.recovery_resource = recovery_resource
        self.deadline = deadline

    def _validate(self) -> None:
        if self.json is not None and self.data is not None:
            raise ConfigurationError(f"{self.task_id}: pass json= or data=, not both.")
        if self.max_sends < 1:
            raise ConfigurationError(f"{self.task_id}: max_sends must be at least 1.")

    def _request_record(self, fields: frozenset[str]) -> dict[str, Any]:
        return {
            "method": self.method.upper(),
            "endpoint": self.endpoint,
            "json": redact(self.json, fields),
            "data": redact(self.data, fields),
        }

    def execute(self, context: Context) -> Any:
        self._validate()
        fields = frozenset(f.lower() for f in self.redact_fields) | _ALWAYS_REDACTED
        # The connection first: a missing or broken one fails the task before the ledger records
        # an intent, so no retry mistakes it for a call that may have been sent.
        session, url = self._session()
        # Before the ledger: a re-run killed while it waits for a place has recorded nothing.
        with self.recovery_place(context):
            return self._call(context, session, url, fields)

    def default_recovery_resource(self) -> str:
        return self.http_conn_id

    def _call(self, context: Context, session: requests.Session, url: str, fields: frozenset[str]) -> Any:
        call = begin_call(
            target=self.target or self.task_id,
            request=self._request_record(fields),
            context=context,
            version=self.version,
            on_unknown_outcome=self.on_unknown_outcome,
            slot_partition=self.slot_partition,
            in_flight_wait=self.in_flight_wait,
            # An older attempt sends again (a sign of life) at least this often while it runs.
            holder_lease=self.timeout + MAX_BACKOFF_SECONDS,
        )
        if call.action == "replay":
            self.log.info(
                "Call %s already succeeded (key %s); returning its recorded result.", call.target, call.key
            )
            return call.replayed_result
        return self._send(call, session, url, fields)

    def _session(self) -> tuple[requests.Session, str]:
        """The Airflow HTTP connection's session (base URL, auth, extra headers) and the full URL."""
        from airflow.providers.http.hooks.http import HttpHook

        hook = HttpHook(method=self.method, http_conn_id=self.http_conn_id)
        return hook.get_conn(headers=dict(self.headers or {})), hook.url_from_endpoint(self.endpoint)

    def _send(self, call: Call, session: requests.Session, url: str, fields: frozenset[str]) -> Any:
        import requests

        headers = {self.key_header: call.key}
        sends, deadline_409, last_error = 0, time.monotonic() + self.in_progress_wait, ""
        response: requests.Response | None
        while True:
            record_send(call)
            sends += 1
            try:
                response = session.request(
                    self.method.upper(),
                    url,
                    json=self.json,
                    data=self.data,
                    headers=headers,
                    timeout=self.timeout,
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                answer, last_error, response = "transient", f"{type(exc).__name__}", None
                never_arrived = isinstance(exc, requests.ConnectTimeout) or _refused(exc)
            else:
                answer, last_error = classify(response.status_code), f"HTTP {response.status_code}"
                never_arrived = False
            self.log.info("%s %s (key %s): %s", self.method.upper(), self.endpoint, call.key, last_error)
            if answer == "success" and response is not None:
                return self._succeeded(call, response, fields)
            status = None if response is None else response.status_code
            if answer == "conflict":
                finish_call(call, state="conflict", response_status=status, error=last_error)
                raise IdempotencyConflict(
                    f"{call.target!r} answered {last_error}: key {call.key} was already used with a "
                    "different payload. Nothing more was sent. Bump version= to send under a new key."
                )
            if answer == "refused":
                finish_call(call, state="failed", response_status=status, error=last_error)
                raise ExternalCallFailed(
                    f"{call.target!r} refused the call ({last_error}, key {call.key}); it is not "
                    "retried because the target did not act. Fix the request and retry the task.",
                    status=status,
                )
            if answer == "in_progress" and time.monotonic() < deadline_409:
                time.sleep(
                    min(
                        backoff_seconds(sends, base=self.backoff_base),
                        max(0.0, deadline_409 - time.monotonic()),
                    )
                )
                continue
            # A target that does not honour keys ("fail") may have acted on an ambiguous answer
            # (timeout, 5xx): sending again could pay twice. Only a request that never reached
            # it (connection refused, connect timeout) is retried then.
            may_resend = self.on_unknown_outcome == "resend" or never_arrived
            if answer != "in_progress" and sends < self.max_sends and may_resend:
                time.sleep(backoff_seconds(sends, base=self.backoff_base))
                continue
            finish_call(call, state="unknown", response_status=status, error=last_error)
            raise ExternalCallFailed(
                f"{call.target!r} gave no final answer after {sends} request(s) (last: {last_error}); "
                f"key {call.key}. The target may have acted: a retry re-sends with the same key "
                f"only if on_unknown_outcome='resend' (now {self.on_unknown_outcome!r}).",
                status=status,
                outcome_unknown=True,
            )

    def _succeeded(self, call: Call, response: requests.Response, fields: frozenset[str]) -> Any:
        if self.response_check is not None and not self.response_check(response):
            finish_call(
                call,
                state="failed",
                response_status=response.status_code,
                error="response_check returned False",
            )
            raise ExternalCallFailed(
                f"{call.target!r} answered HTTP {response.status_code} but response_check rejected it.",
                status=response.status_code,
            )
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text
        result = {"status": response.status_code, "key": call.key, "body": redact(body, fields)}
        finish_call(call, state="succeeded", response_status=response.status_code, result=result)
        return jsonlib.loads(jsonlib.dumps(result, default=str))


def _refused(exc: BaseException) -> bool:
    """True when the connection was never established, so the request cannot have arrived."""
    import urllib3.exceptions

    seen: object = exc
    for _ in range(8):  # requests wraps urllib3 wraps the socket error: follow a few links
        if isinstance(seen, urllib3.exceptions.NewConnectionError | ConnectionRefusedError):
            return True
        if not isinstance(seen, BaseException):
            return False
        linked = seen.__cause__ or seen.__context__ or getattr(seen, "reason", None)
        seen = linked if linked is not None else (seen.args[0] if seen.args else None)
    return False
