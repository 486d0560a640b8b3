"""A canary secret sent through every field a call has: it must surface nowhere crashsafe writes or shows.

Real components throughout: a PostgreSQL store, a local vendor over HTTP, the console script, the
UI app in process. The canary goes out in the endpoint's query string, a JSON body field, a form
body, a raw text body, a header and the connection's password; it comes back in the vendor's
response body and headers; it is quoted by an exception inside ``effect()``. Then every column of
every table, the task's log output, the XCom values, ``ledger show`` and every UI page and JSON
route are grepped for it.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from airflow_crashsafe.effects import calls, effect
from airflow_crashsafe.effects.http_policy import HONOURS_KEYS_EXTRA
from airflow_crashsafe.errors import ExternalCallFailed
from airflow_crashsafe.operators import http
from airflow_crashsafe.operators.http import IdempotentHttpOperator
from airflow_crashsafe.store import ledger as ledger_sql
from airflow_crashsafe.store.store import Store, open_store, reset_store_cache
from airflow_crashsafe.testing import fake_context
from airflow_crashsafe.testing.http import LocalServer, Received, Reply
from tests.support.cli import run_cli
from tests.support.secret_corpus import encoded_forms
from tests.unit.ui.conftest import UiHarness

pytestmark = pytest.mark.integration

CANARY = "CANARY-7f3a9"
#: A Basic credential too short to be taken for a base64 run: only its scheme word marks it.
BASIC_CANARY = base64.b64encode(b"u:K9").decode()
#: The connection's password: Airflow's masker learns it when the connection loads, so it is a
#: canary of its own, kept apart from the one crashsafe's policy alone must hide.
CONN_CANARY = "CONN-CANARY-51e8"
DAG = "canary_dag"
UI_PATHS = [
    "/",
    "/duplicates",
    "/ledger",
    "/fences",
    "/api/overview",
    "/api/duplicates",
    "/api/ledger",
    "/api/fences",
]


def vendor_reply(request: Received) -> Reply:
    """A vendor that echoes credentials back, as OAuth token endpoints and careless APIs do."""
    if request.path.startswith("/fail"):
        return Reply(500, {"error": f"bad client_secret={CANARY}"}, headers={"X-Api-Key": CANARY})
    if request.path.startswith("/text"):
        return Reply(200, f"access_token={CANARY}&refresh_token={CANARY}&expires_in=3600")
    return Reply(
        201,
        {
            "id": "tok_1",
            "refresh_token": CANARY,
            "x-api-key": CANARY,
            "nested": [{"client_secret": CANARY}],
            "echo": f"you sent {CANARY}",  # under no secret name: known from the request
            "auth_seen": base64.b64encode(request.headers.get("Authorization", "").encode()).decode(),
            "body_seen": quote(request.body.decode("utf-8", "replace"), safe=""),
        },
        headers={"X-Api-Key": CANARY, "Set-Cookie": f"session={CANARY}"},
    )


@pytest.fixture(autouse=True)
def fresh_airflow_masker() -> Iterator[None]:
    """Airflow's secrets masker forgets what earlier tests registered, before and after each test."""
    from airflow.sdk._shared.secrets_masker import reset_secrets_masker

    reset_secrets_masker()
    yield
    reset_secrets_masker()


@pytest.fixture
def store(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A migrated PostgreSQL crashsafe store, the one ``open_store()`` gives."""
    monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", postgres_url)
    reset_store_cache()
    store = open_store()
    store.migrate()
    yield store
    reset_store_cache()


@pytest.fixture
def vendor(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalServer]:
    """The vendor behind the connection ``vendor`` (whose password is a canary too)."""
    with LocalServer(vendor_reply) as server:
        url = server.url.replace("http://", f"http://svc:{CONN_CANARY}@")
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", f"{url}?{HONOURS_KEYS_EXTRA}=true")
        yield server


def ctx(task_id: str, try_number: int = 1) -> dict[str, Any]:
    return fake_context(dag_id=DAG, task_id=task_id, try_number=try_number)


def call(task_id: str, **arguments: Any) -> IdempotentHttpOperator:
    base: dict[str, Any] = {
        "task_id": task_id,
        "http_conn_id": "vendor",
        "endpoint": f"/token?api_key={CANARY}&page=2",
        "safe_query_params": ["page"],
        "headers": {"X-Api-Key": CANARY, "Authorization": f"Bearer {CANARY}"},
        "max_sends": 2,
        "timeout": 5,
        "backoff_base": 0.01,
    }
    return IdempotentHttpOperator(**(base | arguments))


def send_everything(vendor: LocalServer) -> list[Any]:
    """Every way the canary can enter a call; returns what each task returned to XCom."""
    returned = [
        call("json_body", json={"client_secret": CANARY, "amount": 5}).execute(ctx("json_body")),
        call("form_text", data=f"grant_type=refresh_token&client_secret={CANARY}").execute(ctx("form_text")),
        call("form_dict", data={"client_secret": CANARY, "amount": "5"}).execute(ctx("form_dict")),
        call("raw_text", data=f"please pay, my password is {CANARY}").execute(ctx("raw_text")),
        call("text_reply", endpoint=f"/text?api_key={CANARY}").execute(ctx("text_reply")),
        call("named_field", json={"card": CANARY}, redact_fields=["card"]).execute(ctx("named_field")),
    ]
    # A replay returns the recorded result: the same redacted value.
    returned.append(
        call("json_body", json={"client_secret": CANARY, "amount": 5}).execute(ctx("json_body", 2))
    )
    with pytest.raises(ExternalCallFailed):
        call("vendor_fails", endpoint=f"/fail?token={CANARY}", json={"n": 1}).execute(ctx("vendor_fails"))
    assert all(CANARY in r.path or CANARY in str(r.headers) for r in vendor.requests)  # it was sent
    for error in (
        RuntimeError(f"vendor said: client_secret={CANARY} is wrong"),
        ConnectionError(f"POST https://svc:{CANARY}@api.example.com/x?api_key={CANARY} failed"),
        ValueError(f"rejected {CANARY}"),  # a bare value: known because the payload holds it
        PermissionError(f"proxy rejected Basic {BASIC_CANARY} (407)"),  # known by its scheme alone
    ):
        with (
            pytest.raises(type(error)),
            effect(
                f"effect_{type(error).__name__}",
                context=ctx("effect_task"),
                payload={"to": "ops@example.com", "password": CANARY},
            ),
        ):
            raise error
    with effect("effect_done", context=ctx("effect_done"), payload={"token": CANARY}) as fx:
        fx.done({"message_id": "m1", "session_token": CANARY})
    return returned


def store_dump(store: Store) -> str:
    """Every column of every row of every table in the store's database, as text."""
    dump = []
    with store.transaction() as db:
        tables = [
            r[0]
            for r in db.execute(
                "SELECT table_schema || '.' || table_name FROM information_schema.tables "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            ).fetchall()
        ]
        assert any(t.endswith("ledger") for t in tables), tables
        for table in tables:
            schema, name = table.split(".")
            dump += [
                str(row) for row in db.execute(f'SELECT t::text FROM "{schema}"."{name}" AS t').fetchall()
            ]
    return "\n".join(dump)


def ui_dump(store: Store) -> str:
    """Every page and JSON route of the UI, for a user who may read the DAG."""
    harness = UiHarness(store)
    harness.allowed = {DAG}
    # One event loop for every request: its worker threads each open a store connection, which
    # the store closes once their thread has ended (awaited here, not left to a later test's GC).
    with harness.client:
        responses = [harness.get(path) for path in UI_PATHS]
        responses += [
            harness.get(path, dag_id=DAG, task_id="json_body", map_index=-1)
            for path in ("/api/timeline", "/timeline")
        ]
    for thread in threading.enumerate():
        if thread.name.startswith(("AnyIO worker", "asyncio-portal")):
            thread.join(10)
    assert all(r.status_code in (200, 404) for r in responses), [r.status_code for r in responses]
    return "\n".join(r.text for r in responses)


def cli_dump(capfd: pytest.CaptureFixture[str]) -> str:
    """``ledger show`` of the DAG, as a table and as JSON, and of every key one by one."""
    code, table, _ = run_cli(capfd, "ledger", "show", "--dag", DAG)
    assert code == 0
    code, as_json, _ = run_cli(capfd, "ledger", "show", "--dag", DAG, "--json")
    assert code == 0
    assert DAG in as_json
    out = [table, as_json]
    for line in table.splitlines()[1:]:
        out.append(run_cli(capfd, "ledger", "show", line.split()[0])[1])
    return "\n".join(out)


def test_canary_appears_nowhere(
    store: Store,
    vendor: LocalServer,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Store tables, task log, XCom, ledger show and every UI response hold no trace of the canary,
    raw, URL-encoded or base64-encoded, nor of a Basic credential quoted in an error."""
    # Airflow's own masker would hide registered secrets in the log: switch it off, so that what
    # is proven here is crashsafe's redaction, not the masker's.
    monkeypatch.setattr(http, "mask_in_task_log", lambda secrets: None)
    monkeypatch.setattr(calls, "mask_in_task_log", lambda secrets: None)
    caplog.set_level(logging.INFO)
    returned = send_everything(vendor)
    task_log = capfd.readouterr().out + caplog.text
    assert "POST /token?page=2" in task_log  # the endpoint is logged, stripped of its secret
    places = {
        "XCom": repr(returned),
        "task log": task_log,
        "store": store_dump(store),
        "ledger show": cli_dump(capfd),
        "UI": ui_dump(store),
    }
    # Each place really holds the calls (the grep is not of an empty page): their results are there.
    holding = {place: "tok_1" in text for place, text in places.items() if place != "task log"}
    assert all(holding.values()), holding
    forms = [*encoded_forms(CANARY), *encoded_forms(CONN_CANARY), BASIC_CANARY]
    leaked = [f"{form!r} in {place}" for place, text in places.items() for form in forms if form in text]
    assert not leaked, f"the canary leaked into: {leaked}"
    assert returned[0]["body"]["id"] == "tok_1"  # what is not secret is still there
    assert returned[-1] == returned[0]
    assert "expires_in=3600" in returned[4]["body"]


def test_secrets_registered_with_airflows_masker_hide_debug_lines(
    store: Store, vendor: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    """At DEBUG, urllib3 logs the full URL; the call registered its secrets, so the task log masks them."""
    from airflow.sdk._shared.secrets_masker import redact

    caplog.set_level(logging.DEBUG)
    call("debug_task", json={"n": 1}).execute(ctx("debug_task"))
    urllib3_lines = [r.getMessage() for r in caplog.records if r.name.startswith("urllib3")]
    assert any(CANARY in line for line in urllib3_lines)  # the premise: a third party's line
    # Airflow's masker filters every line of the real task log; it now knows the secrets.
    assert not [line for line in urllib3_lines if CANARY in str(redact(line))]


def test_rows_stored_in_clear_before_the_policy_are_redacted_when_shown(
    store: Store, capfd: pytest.CaptureFixture[str]
) -> None:
    """A ledger row written in clear (an older version) is redacted by ledger show and the UI."""
    from airflow_crashsafe.identity import attempt_from_context, slot_from_context

    context = ctx("legacy")
    slot, attempt = slot_from_context(context), attempt_from_context(context)
    request = {"endpoint": f"/pay?api_key={CANARY}", "json": {"client_secret": CANARY}}
    db = store.connection()
    ledger_sql.claim_new(
        db,
        key="legacy-key",
        slot=slot,
        target="legacy",
        fence_target="ledger:legacy",
        version=1,
        fingerprint="f",
        request=request,
        attempt=attempt,
    )
    with db.autocommit():
        ledger_sql.record_outcome(
            db,
            "legacy-key",
            state="unknown",
            response_status=500,
            result={"refresh_token": CANARY},
            error=f"HTTPError: 500 for url https://api.example.com/pay?api_key={CANARY} (token: {CANARY})",
        )
    assert CANARY in store_dump(store)  # the premise: it is there, in clear
    shown = cli_dump(capfd) + ui_dump(store)
    assert "legacy-key" in shown
    assert CANARY not in shown
