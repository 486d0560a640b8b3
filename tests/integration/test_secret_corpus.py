"""A corpus of real secret shapes sent through IdempotentHttpOperator: none surfaces anywhere.

Real components: a PostgreSQL store, a local vendor over HTTP that echoes everything it received
(path, header lines, bare header values, the body as text and as base64, the Authorization header
as base64), the console script, the UI app in process. The secrets travel in the URL path (a
Telegram bot token, Slack/Discord/Teams webhook secrets, a random file id), the query (an Azure
SAS signature, an API key), headers (JWT bearer, ``Token``, ``x-functions-key``,
``Ocp-Apim-Subscription-Key``, ``DD-API-KEY``, a cookie), the connection (its password, sent as
Basic, and a secret extra sent as a header), JSON fields under secret names in every case style,
JSON string values holding every shape of :func:`tests.support.secret_corpus.text_shapes`, form
bodies (OAuth, URL-encoded, base64), a vendor error, and an exception inside ``effect()``.
Each secret is then searched for, raw, URL-encoded and base64-encoded, in every row of every
table, the XCom values, crashsafe's log lines, every log line as Airflow's masker writes it to
the task log, ``ledger show``, the UI's pages and JSON routes, and the errors crashsafe raised; and found
in what the vendor received.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from airflow_crashsafe import redaction
from airflow_crashsafe.effects import effect
from airflow_crashsafe.effects.http_policy import HONOURS_KEYS_EXTRA
from airflow_crashsafe.errors import ExternalCallFailed
from airflow_crashsafe.operators.http import IdempotentHttpOperator
from airflow_crashsafe.testing import fake_context
from airflow_crashsafe.testing.http import LocalServer, Received, Reply
from tests.integration.test_secret_canary import (  # noqa: F401 - fixtures used by name
    DAG,
    cli_dump,
    fresh_airflow_masker,
    store,
    store_dump,
    ui_dump,
)
from tests.support.secret_corpus import ALNUM, DIGITS, HEX, URLSAFE, Tokens, encoded_forms, text_shapes

pytestmark = pytest.mark.integration

SHAPES = text_shapes(seed=7)


class Corpus:
    """The secrets of one run by name (the text shapes' and each placement's), made fresh."""

    def __init__(self) -> None:
        self.t = Tokens(seed=2027)
        self.secrets: dict[str, str] = {f"text {s.name}": s.secret for s in SHAPES}
        self.not_sent: set[str] = set()  # what only an exception in effect() quotes

    def add(self, name: str, secret: str, *, sent: bool = True) -> str:
        self.secrets[name] = secret
        if not sent:
            self.not_sent.add(name)
        return secret


def echo(request: Received) -> Reply:
    """A vendor that sends back everything it got, in every form a careless API might."""
    body = request.body.decode("utf-8", "replace")
    echoed = {
        "id": "tok_1",
        "path": request.path,
        "header_lines": [f"{k}: {v}" for k, v in request.headers.items()],
        "header_values": list(request.headers.values()),
        "body": body,
        "body_b64": base64.b64encode(request.body).decode(),
        "authorization_b64": base64.b64encode(request.headers.get("Authorization", "").encode()).decode(),
    }
    if request.path.startswith("/fail"):
        return Reply(500, echoed, headers={"X-Debug-Token": echoed["authorization_b64"]})
    if request.path.startswith("/text"):
        return Reply(200, "tok_1\n" + "\n".join(echoed["header_lines"]) + f"\n\n{request.path}\n{body}")
    return Reply(201, echoed, headers={"Set-Cookie": f"session={echoed['authorization_b64']}"})


@pytest.fixture
def vendor(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LocalServer, Corpus]]:
    """The echoing vendor behind two connections: one with a login and a secret extra, one without."""
    corpus = Corpus()
    password = corpus.add("connection password", corpus.t.password())
    tenant_key = corpus.add("connection extra x-tenant-key", corpus.t.chars(HEX, 40))
    with LocalServer(echo) as server:
        with_login = server.url.replace("http://", f"http://svc:{quote(password, safe='')}@")
        monkeypatch.setenv(
            "AIRFLOW_CONN_VENDOR_BASIC", f"{with_login}?{HONOURS_KEYS_EXTRA}=true&x-tenant-key={tenant_key}"
        )
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", f"{server.url}?{HONOURS_KEYS_EXTRA}=true")
        yield server, corpus


def ctx(task_id: str, try_number: int = 1) -> dict[str, Any]:
    return fake_context(dag_id=DAG, task_id=task_id, try_number=try_number)


def call(task_id: str, **arguments: Any) -> IdempotentHttpOperator:
    base: dict[str, Any] = {
        "task_id": task_id,
        "http_conn_id": "vendor",
        "endpoint": "/v1/echo",
        "max_sends": 1,
        "timeout": 5,
        "backoff_base": 0.01,
    }
    return IdempotentHttpOperator(**(base | arguments))


def send_corpus(corpus: Corpus) -> tuple[list[Any], list[BaseException]]:
    """Every placement of the corpus, as tasks; what they returned to XCom and what crashsafe raised."""
    from airflow.sdk._shared.secrets_masker import redact as airflow_masker

    t, add = corpus.t, corpus.add
    telegram = add("path telegram bot token", f"{t.chars(DIGITS, 10)}:AA{t.chars(URLSAFE, 33)}")
    slack = add("path slack webhook secret", t.chars(ALNUM, 24))
    discord = add("path discord webhook token", t.chars(URLSAFE, 68))
    teams = add("path teams webhook secret", t.chars(HEX, 32))
    file_id = add("path long random segment", t.chars(URLSAFE, 44))
    sas = add("query azure sas signature", t.b64(32))
    api_key = add("query api_key", t.chars(ALNUM, 32))
    jwt = t.jwt()
    add("header bearer jwt signature", jwt.rsplit(".", 1)[1])
    names = {
        name: add(f"json {name}", value)
        for name, value in {
            "pwd": t.password(),
            "jwt": t.jwt(),
            "apiKey": t.chars(ALNUM, 40),
            "clientSecret": t.chars(URLSAFE, 40),
            "DB_PASSWORD": t.password(),
            "x-api-token": t.chars(ALNUM, 30),
            "refresh_token": t.chars(URLSAFE, 60),
            "privateKeyPassphrase": t.password(),
            "sessionId": t.chars(ALNUM, 32),
        }.items()
    }
    account_key = add("json connectionString AccountKey", t.b64(64))
    webhook = add("json webhookUrl slack secret", t.chars(ALNUM, 24))
    headers = {
        "x-functions-key": add("header x-functions-key", t.chars(URLSAFE, 54)),
        "Ocp-Apim-Subscription-Key": add("header Ocp-Apim-Subscription-Key", t.chars(HEX, 32)),
        "DD-API-KEY": add("header DD-API-KEY", t.chars(HEX, 32)),
        "Cookie": f"theme=dark; session={add('header cookie session', t.chars(URLSAFE, 32))}",
    }
    form = {
        "grant_type": "refresh_token",
        "client_secret": add("form client_secret", t.chars(URLSAFE, 40)),
        "refresh_token": add("form refresh_token", t.chars(URLSAFE, 60)),
    }
    encoded_webhook = add("form url-encoded webhook secret", t.chars(ALNUM, 24))
    b64_password = add("form base64 password pair", t.chars(ALNUM, 20))
    error_secret = add("effect error password", t.password(), sent=False)
    token_scheme = add("header Token credential", t.chars(HEX, 40))

    json_body = {
        **names,
        "connectionString": f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={account_key};",
        "webhookUrl": f"https://hooks.slack.com/services/T0AB12CD3/B0AB12CD34E/{webhook}",
        "messages": [shape.text for shape in SHAPES],
        "amount": 5,
    }
    slack_url = quote(f"https://hooks.slack.com/services/T0AB12/B0AB12/{encoded_webhook}", safe="")
    state = base64.b64encode(f"password={b64_password}".encode()).decode()
    uuid = t.uuid
    tasks: list[tuple[str, dict[str, Any]]] = [
        ("path_telegram", {"endpoint": f"/bot{telegram}/sendMessage?api_key={api_key}&page=1"}),
        ("path_slack", {"endpoint": f"/services/T0AB12CD3/B0AB12CD34E/{slack}"}),
        ("path_discord", {"endpoint": f"/api/webhooks/{t.chars(DIGITS, 18)}/{discord}"}),
        ("path_teams", {"endpoint": f"/webhookb2/{uuid()}@{uuid()}/IncomingWebhook/{teams}/{uuid()}"}),
        ("path_file", {"endpoint": f"/drive/v3/files/{file_id}/export", "method": "PUT"}),
        ("query_sas", {"endpoint": f"/blob/x.csv?sv=2022-11-02&sr=b&sp=r&sig={quote(sas, safe='')}"}),
        ("headers", {"headers": {"Authorization": f"Bearer {jwt}", **headers}}),
        ("token_scheme", {"headers": {"Authorization": f"Token {token_scheme}"}}),
        ("json_body", {"http_conn_id": "vendor_basic", "json": json_body}),
        ("form_dict", {"http_conn_id": "vendor_basic", "data": form, "json": None}),
        ("form_text", {"data": f"callback={slack_url}&state={state}", "json": None}),
        ("text_reply", {"endpoint": "/text/v1", "json": {"messages": [s.text for s in SHAPES[:20]]}}),
    ]
    returned: list[Any] = []
    for task_id, arguments in tasks:
        arguments = {"json": {"task": task_id}, "safe_query_params": ["page"]} | arguments
        returned.append(call(task_id, **arguments).execute(ctx(task_id)))
    returned.append(
        call("json_body", http_conn_id="vendor_basic", json=json_body).execute(ctx("json_body", 2))
    )
    raised: list[BaseException] = []
    failing = call(
        "vendor_fails", http_conn_id="vendor_basic", endpoint=f"/fail/bot{telegram}/x", json=json_body
    )
    with pytest.raises(ExternalCallFailed) as failed:
        failing.execute(ctx("vendor_fails"))
    raised.append(failed.value)
    quoted = " | ".join(s.text for s in SHAPES[20:40])
    with (
        pytest.raises(RuntimeError) as in_effect,
        effect("corpus_effect", context=ctx("effect_task"), payload={"password": error_secret}),
    ):
        raise RuntimeError(f"login failed for {error_secret}: {quoted}")
    # The block's own exception is re-raised as it was (it is the user's); its stored text is
    # redacted (the store is searched) and the task log masks the payload's secret.
    assert error_secret in str(in_effect.value)
    assert error_secret not in str(airflow_masker(str(in_effect.value)))
    return returned, raised


def vendor_received(server: LocalServer) -> str:
    """Everything the vendor got, with Basic credentials decoded."""
    parts = []
    for request in server.requests:
        parts += [request.path, request.body.decode("utf-8", "replace")]
        parts += [f"{k}: {v}" for k, v in request.headers.items()]
        scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
        if scheme == "Basic":
            parts.append(base64.b64decode(credential).decode())
    return "\n".join(parts)


def leaks(places: dict[str, str], secrets: dict[str, str]) -> list[str]:
    return [
        f"{name} in {place} as {form!r}"
        for name, secret in secrets.items()
        for form in encoded_forms(secret)
        for place, text in places.items()
        if form in text
    ]


def test_no_secret_of_the_corpus_surfaces_anywhere(
    store: Any,  # noqa: F811 - the canary test's fixture
    vendor: tuple[LocalServer, Corpus],
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Store tables, XCom, log lines, ledger show, UI and errors hold none; the vendor got them all."""
    from airflow.sdk._shared.secrets_masker import redact as airflow_masker

    server, corpus = vendor
    # What is proven for the store, XCom, ledger show and the UI is crashsafe's own redaction:
    # the secrets the calls register with Airflow's masker are not consulted there.
    monkeypatch.setattr(redaction, "_airflow_masked", lambda text: text)
    caplog.set_level(logging.DEBUG)
    returned, raised = send_corpus(corpus)
    assert len(corpus.secrets) >= 80
    received = vendor_received(server)
    not_sent = [
        name
        for name, secret in corpus.secrets.items()
        if name not in corpus.not_sent and not any(form in received for form in encoded_forms(secret))
    ]
    assert not not_sent, f"the vendor did not receive: {not_sent}"

    printed = capfd.readouterr()
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("airflow_crashsafe")]
    ours += (printed.out + printed.err).splitlines()  # the operator logs through Airflow's structlog
    assert any("POST /bot***/sendMessage" in line for line in ours)  # the call was logged, masked
    every_line = ours + [r.getMessage() for r in caplog.records]
    assert any("urllib3" in r.name for r in caplog.records)  # third-party DEBUG lines are in it
    places = {
        "XCom": repr(returned),
        "crashsafe's log lines": "\n".join(ours),
        "task log through Airflow's masker": "\n".join(str(airflow_masker(line)) for line in every_line),
        "raised errors": "\n".join(f"{e!s} {e!r}" for e in raised),
        "store": store_dump(store),
        "ledger show": cli_dump(capfd),
        "UI": ui_dump(store),
    }
    holding = {place: "tok_1" in text for place, text in places.items() if "log" not in place}
    holding.pop("raised errors")
    assert all(holding.values()), holding  # each place really holds the calls' results
    found = leaks(places, corpus.secrets)
    assert not found, "secrets surfaced:\n" + "\n".join(found)
    assert returned[0]["body"]["id"] == "tok_1"  # what is not secret is still there
    json_body, replayed = returned[8], returned[12]
    assert replayed == json_body  # the replay returns the recorded, redacted result
