"""``IdempotentHttpOperator``: an HTTP call that a crashed, reset or retried task never sends twice.

Intent is recorded in the crashsafe ledger before the request leaves and the outcome after; the
request carries an idempotency key derived from the slot and target, the same in every attempt.
A retry of a recorded success sends nothing and returns the recorded result.

Nothing secret is stored, logged or returned: the endpoint's query string, secret-named body and
response fields, and text bodies pass through one :class:`~airflow_crashsafe.redaction.RedactionPolicy`.
Whether a retry may re-send after an unknown outcome is for the user to declare
(``target_honours_keys=`` or the connection's extra ``crashsafe_honours_idempotency_keys``); an
undeclared target is never re-sent to.
"""

from __future__ import annotations

import json as jsonlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason

from airflow_crashsafe.admission.operator import AdmissionResume, RecoveryAdmissionMixin
from airflow_crashsafe.admission.rules import Deadline
from airflow_crashsafe.effects.calls import Call, UnknownOutcomePolicy, begin_call, finish_call, record_send
from airflow_crashsafe.effects.http_policy import (
    DECLARE_HINT,
    HONOURS_KEYS_EXTRA,
    MAX_BACKOFF_SECONDS,
    backoff_seconds,
    classify,
    unknown_outcome_policy,
)
from airflow_crashsafe.errors import (
    ConfigurationError,
    ExternalCallFailed,
    IdempotencyConflict,
    OutcomeUnknown,
)
from airflow_crashsafe.redaction import (
    RedactionPolicy,
    auth_secrets,
    body_fields,
    mask_in_task_log,
    query_params,
)

if TYPE_CHECKING:
    import jinja2
    import requests
    from airflow.sdk import Context

__all__ = ["IdempotentHttpOperator"]


class IdempotentHttpOperator(RecoveryAdmissionMixin, BaseOperator):
    """Call an HTTP endpoint at most once per slot, with an idempotency key and a ledger.

    :param http_conn_id: Airflow HTTP connection (base URL and auth).
    :param endpoint: path appended to the connection's base URL.
    :param method: HTTP method.
    :param json: JSON body. :param data: form or raw body (use one of the two); a text body that
        is neither JSON nor a form is stored only as its SHA-256 and length.
    :param headers: extra headers (never stored or logged).
    :param target: what is called, for the key; defaults to the task id.
    :param key_header: header carrying the idempotency key.
    :param target_honours_keys: whether the target honours the key header (a repeat with the same
        key does not act twice). ``True``: after an unknown outcome a retry re-sends with the same
        key; ``False``: it stops with ``OutcomeUnknown``. Default: the HTTP connection's extra
        ``crashsafe_honours_idempotency_keys``, and when that is absent too, ``False``.
    :param on_unknown_outcome: explicit override, ``"resend"`` or ``"fail"``; ``"resend"`` with a
        target declared not to honour keys is a configuration error.
    :param response_check: ``callable(response) -> bool``; False fails the call for good.
    :param redact_fields: body and response fields never written to the store, logs or XCom, on
        top of every field whose name looks secret (see :mod:`airflow_crashsafe.redaction`).
    :param safe_query_params: query parameters of ``endpoint`` kept in the ledger and the log; the
        rest of the query string is stripped (the request still carries it).
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
        target_honours_keys: bool | None = None,
        on_unknown_outcome: UnknownOutcomePolicy | None = None,
        response_check: Callable[[requests.Response], bool] | None = None,
        redact_fields: Sequence[str] = (),
        safe_query_params: Sequence[str] = (),
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
        self.target_honours_keys = target_honours_keys
        self.on_unknown_outcome = on_unknown_outcome
        # A contradiction in the DAG file fails at parse time; one with the connection, at run time.
        unknown_outcome_policy(
            self.task_id, explicit=on_unknown_outcome, declared=target_honours_keys, connection=None
        )
        self.response_check = response_check
        self.redact_fields = tuple(redact_fields)
        self.safe_query_params = tuple(safe_query_params)
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

    def render_template_fields(self, context: Context, jinja_env: jinja2.Environment | None = None) -> None:
        """Render, then register the rendered secrets with Airflow's masker.

        Airflow stores the rendered fields (the "Rendered Template" view) right after this, before
        ``execute``: a credential in the endpoint's query string or in a form body must already be
        known to its masker then.
        """
        super().render_template_fields(context, jinja_env)
        self._redaction()

    def _redaction(self) -> RedactionPolicy:
        """The call's policy, knowing its secrets: the values of secret-named headers, fields and
        parameters, the tokens in its endpoint's path, and whatever else has a secret's shape."""
        policy = RedactionPolicy.of(self.redact_fields, self.safe_query_params)
        policy = policy.knowing(
            dict(self.headers or {}),
            query_params(self.endpoint),
            self.json,
            body_fields(self.data),
            urls=[self.endpoint],
        )
        mask_in_task_log(policy.log_masks())
        return policy

    @staticmethod
    def _knowing_session(policy: RedactionPolicy, session: requests.Session, url: str) -> RedactionPolicy:
        """The policy, also knowing what the connection adds: its headers (extras), its login's
        password and Basic credential, and the tokens in its base URL's path."""
        policy = policy.knowing(dict(session.headers), auth_secrets(session.auth), urls=[url])
        mask_in_task_log(policy.log_masks())
        return policy

    def _request_record(self, policy: RedactionPolicy) -> dict[str, Any]:
        """What the ledger keeps of the request; its fingerprint tells a retry from a new payload."""
        record = {
            "method": self.method.upper(),
            "endpoint": policy.endpoint(self.endpoint),
            "json": policy.value(self.json),
            "data": policy.body(self.data),
        }
        digest = policy.query_digest(self.endpoint)
        if digest is not None:
            record["query_sha256"] = digest
        # What was masked only for reading as random (an id in the path, maybe) still counts.
        opaque = policy.opaque_digest([self.json, body_fields(self.data)], endpoint=self.endpoint)
        if opaque is not None:
            record["opaque_sha256"] = opaque
        return record

    def execute(self, context: Context) -> Any:
        return self.execute_admitted(context, None)

    def execute_admitted(self, context: Context, admission: AdmissionResume | None) -> Any:
        """``execute``; back from a wait for a recovery place, ``admission`` is the place won."""
        self._validate()
        policy = self._redaction()
        # The connection first: a missing or broken one fails the task before the ledger records
        # an intent, so no retry mistakes it for a call that may have been sent.
        session, url, honours = self._session()
        policy = self._knowing_session(policy, session, url)
        on_unknown = unknown_outcome_policy(
            self.task_id,
            explicit=self.on_unknown_outcome,
            declared=self.target_honours_keys,
            connection=honours,
        )
        undeclared = self.on_unknown_outcome is None and self.target_honours_keys is None and honours is None
        if undeclared:
            self.log.info(
                "Nobody declared whether %s honours %s, so an unknown outcome stops the task "
                "instead of re-sending. %s",
                self.http_conn_id,
                self.key_header,
                DECLARE_HINT,
            )
        # Before the ledger: a re-run killed while it waits for a place has recorded nothing.
        with self.recovery_place(context, admission):
            return self._call(context, session, url, policy, on_unknown, undeclared=undeclared)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """A wait for a recovery place that the triggerer never answered (Airflow timed the deferral
        out) does not fail the task: the re-run waits for its place in the worker, bounded."""
        timed_out = (next_kwargs or {}).get("error") == TriggerFailureReason.TRIGGER_TIMEOUT.value
        if next_method == TRIGGER_FAIL_REPR and timed_out:
            return self.execute_admitted(context, AdmissionResume.unanswered())
        return super().resume_execution(next_method, next_kwargs, context)

    def default_recovery_resource(self) -> str:
        return self.http_conn_id

    def _call(
        self,
        context: Context,
        session: requests.Session,
        url: str,
        policy: RedactionPolicy,
        on_unknown: UnknownOutcomePolicy,
        *,
        undeclared: bool,
    ) -> Any:
        try:
            call = begin_call(
                target=self.target or self.task_id,
                request=self._request_record(policy),
                context=context,
                version=self.version,
                on_unknown_outcome=on_unknown,
                slot_partition=self.slot_partition,
                in_flight_wait=self.in_flight_wait,
                # An older attempt sends again (a sign of life) at least this often while it runs.
                holder_lease=self.timeout + MAX_BACKOFF_SECONDS,
                redaction=policy,
            )
        except OutcomeUnknown as exc:
            if undeclared:
                raise OutcomeUnknown(f"{exc} {DECLARE_HINT}") from None
            raise
        if call.action == "replay":
            self.log.info(
                "Call %s already succeeded (key %s); returning its recorded result.", call.target, call.key
            )
            return call.replayed_result
        return self._send(call, session, url, on_unknown)

    def _session(self) -> tuple[requests.Session, str, object]:
        """The connection's session (base URL, auth, extra headers), the full URL, its key declaration."""
        from airflow.providers.http.hooks.http import HttpHook

        hook = HttpHook(method=self.method, http_conn_id=self.http_conn_id)
        session = hook.get_conn(headers=dict(self.headers or {}))
        # HttpHook turns unknown extras into headers: the declaration is ours, never sent.
        honours = session.headers.pop(HONOURS_KEYS_EXTRA, None)
        return session, hook.url_from_endpoint(self.endpoint), honours

    def _send(self, call: Call, session: requests.Session, url: str, on_unknown: UnknownOutcomePolicy) -> Any:
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
            self.log.info(
                "%s %s (key %s): %s",
                self.method.upper(),
                call.redaction.endpoint(self.endpoint),
                call.key,
                last_error,
            )
            if answer == "success" and response is not None:
                return self._succeeded(call, response)
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
            may_resend = on_unknown == "resend" or never_arrived
            if answer != "in_progress" and sends < self.max_sends and may_resend:
                time.sleep(backoff_seconds(sends, base=self.backoff_base))
                continue
            finish_call(call, state="unknown", response_status=status, error=last_error)
            raise ExternalCallFailed(
                f"{call.target!r} gave no final answer after {sends} request(s) (last: {last_error}); "
                f"key {call.key}. The target may have acted: a retry re-sends with the same key "
                f"only to a target that honours keys (now on_unknown_outcome={on_unknown!r}). "
                + ("" if on_unknown == "resend" else DECLARE_HINT),
                status=status,
                outcome_unknown=True,
            )

    def _succeeded(self, call: Call, response: requests.Response) -> Any:
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
        # What XCom gets is what the ledger keeps (and a retry replays): the redacted body.
        result = {"status": response.status_code, "key": call.key, "body": call.redaction.response(body)}
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
