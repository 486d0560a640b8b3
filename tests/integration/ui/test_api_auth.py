"""The UI's JSON API and pages on a real api-server with a real auth manager (one boot per module)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from tests.integration.ui.server import DAGS, MARKUP_TASK, Server, boot

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

API_ROUTES = (
    "/api/overview",
    "/api/duplicates",
    "/api/ledger",
    "/api/fences",
    "/api/risk",
    "/api/openapi.json",
)
PAGES = ("/", "/duplicates", "/ledger", "/fences", "/risk", "/runs-at-risk")
TIMELINE = "/timeline?dag_id=bob_ledger&task_id=load_0&run_id=x"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One api-server for the module: users alice and bob (viewers, own DAGs only) and admin."""
    with boot(tmp_path_factory.mktemp("ui-api")) as running:
        yield running


@pytest.fixture(scope="module")
def tokens(server: Server) -> dict[str, str]:
    """A JWT per user, from the real login endpoint."""
    return {user: server.token(user) for user in ("alice", "bob", "admin", "carol", "dave")}


def get(
    server: Server, path: str, *, token: str | None = None, cookie: str | None = None
) -> tuple[int, Any, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if cookie:
        headers["Cookie"] = f"_token={cookie}"
    request = urllib.request.Request(f"{server.url}/crashsafe{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, resp.headers, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read().decode()


@pytest.mark.parametrize(
    "path", [*API_ROUTES, *PAGES, TIMELINE, "/api/timeline?dag_id=x&task_id=y&run_id=z", "/api/runs-at-risk"]
)
def test_anonymous_is_refused_everywhere(server: Server, path: str) -> None:
    """No credential, no data: every route answers 401."""
    status, _, body = get(server, path)
    assert status == 401
    assert "bob_ledger" not in body
    assert "alice_" not in body


def test_alice_sees_only_her_dags(server: Server, tokens: dict[str, str]) -> None:
    """A viewer restricted to alice_* DAGs gets their duplicates, ledger and fences, and no id of bob's."""
    _, _, body = get(server, "/api/duplicates", token=tokens["alice"])
    dags = {item["dag_id"] for item in json.loads(body)["items"]}
    assert dags == {"alice_nightly", "alice_payouts"}
    for path in (*API_ROUTES[:4], *PAGES):
        status, _, text = get(server, path, token=tokens["alice"])
        assert status == 200, path
        assert "bob" not in text.replace("bob-", ""), path  # not even bob's DAG id in a filter list
    ledger = json.loads(get(server, "/api/ledger", token=tokens["alice"])[2])
    assert [e["dag_id"] for e in ledger["items"]] == ["alice_payouts"]


def test_bob_sees_only_his_dag_and_counts_follow(server: Server, tokens: dict[str, str]) -> None:
    """Bob's overview counts only bob_ledger's duplicates; his lists hold bob_ledger alone."""
    overview = json.loads(get(server, "/api/overview", token=tokens["bob"])[2])
    assert overview["duplicates_by_risk"]["critical"] == 2
    items = json.loads(get(server, "/api/duplicates", token=tokens["bob"])[2])["items"]
    assert {i["dag_id"] for i in items} == {"bob_ledger"}
    fences = json.loads(get(server, "/api/fences", token=tokens["bob"])[2])["items"]
    assert {e["dag_id"] for e in fences} == {"bob_ledger"}


def test_admin_sees_every_dag(server: Server, tokens: dict[str, str]) -> None:
    """The admin reads all DAGs, so every recorded duplicate is listed."""
    items = json.loads(get(server, "/api/duplicates", token=tokens["admin"])[2])["items"]
    assert {i["dag_id"] for i in items} == set(DAGS)


def test_a_foreign_slot_is_indistinguishable_from_a_missing_one(
    server: Server, tokens: dict[str, str]
) -> None:
    """Alice asking for bob's slot gets the same 404 as for a slot that never existed."""
    real = get(
        server,
        "/api/timeline?dag_id=bob_ledger&task_id=load_0&partition=" + _partition(server),
        token=tokens["alice"],
    )
    missing = get(server, "/api/timeline?dag_id=nope&task_id=load_0&partition=x", token=tokens["alice"])
    assert real[0] == missing[0] == 404
    assert real[2] == missing[2]
    own = get(
        server,
        "/api/timeline?dag_id=bob_ledger&task_id=load_0&partition=" + _partition(server),
        token=tokens["bob"],
    )
    assert own[0] == 200
    assert len(json.loads(own[2])["executions"]) == 2


def test_the_ui_cookie_authenticates_like_a_bearer_token(server: Server, tokens: dict[str, str]) -> None:
    """Inside Airflow's iframe the browser sends the ``_token`` cookie; that is enough."""
    status, _, body = get(server, "/duplicates", cookie=tokens["alice"])
    assert status == 200
    assert "alice_nightly" in body


def test_markup_from_tasks_and_vendors_renders_as_text(server: Server, tokens: dict[str, str]) -> None:
    """A task id and a vendor body holding markup come out escaped; secrets in the reply are masked."""
    _, _, page = get(server, "/duplicates", token=tokens["alice"])
    assert MARKUP_TASK not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    _, _, ledger = get(server, "/ledger", token=tokens["alice"])
    assert "<script>alert" not in ledger
    assert "&lt;script&gt;alert" in ledger
    assert "s3cr3t" not in ledger
    assert "request-body-xyz" not in ledger


def test_pages_may_be_framed_only_by_the_same_origin(server: Server, tokens: dict[str, str]) -> None:
    """CSP frame-ancestors 'self', X-Frame-Options SAMEORIGIN, and no script source at all."""
    _, headers, _ = get(server, "/", token=tokens["alice"])
    csp = headers["Content-Security-Policy"]
    assert "frame-ancestors 'self'" in csp
    assert "default-src 'none'" in csp
    assert "script-src" not in csp
    assert headers["X-Frame-Options"] == "SAMEORIGIN"


def test_openapi_schema_describes_the_json_api(server: Server, tokens: dict[str, str]) -> None:
    """The schema lists every JSON route with its response model, and needs a user like the rest."""
    status, _, body = get(server, "/api/openapi.json", token=tokens["bob"])
    schema = json.loads(body)
    assert status == 200
    assert set(schema["paths"]) == {
        "/api/overview",
        "/api/duplicates",
        "/api/timeline",
        "/api/ledger",
        "/api/fences",
        "/api/runs-at-risk",
        "/api/risk",
    }
    assert {
        "Overview",
        "DuplicateList",
        "Timeline",
        "LedgerList",
        "EventList",
        "RunsAtRisk",
        "RiskList",
    } <= set(schema["components"]["schemas"])


def test_plugin_lists_the_nav_item_and_the_task_instance_tab(server: Server, tokens: dict[str, str]) -> None:
    """Airflow's own plugins API shows the app at /crashsafe and both external views."""
    request = urllib.request.Request(
        f"{server.url}/api/v2/plugins", headers={"Authorization": f"Bearer {tokens['alice']}"}
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        [plugin] = [p for p in json.loads(resp.read())["plugins"] if p["name"] == "crashsafe"]
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/crashsafe"]
    views = {v["destination"]: v for v in plugin["external_views"]}
    assert views["nav"]["name"] == "Crash safety"
    assert views["task_instance"]["href"].startswith("crashsafe/timeline?dag_id={DAG_ID}")


def _partition(server: Server) -> str:
    return urllib.parse.quote(server.crash.partitions[0], safe="")


def test_task_instance_and_xcom_access_is_checked_where_that_data_is_shown(
    server: Server, tokens: dict[str, str]
) -> None:
    """Reading a DAG is not enough: its executions need task-instance read, its ledger XCom read too."""
    carol = {path: json.loads(get(server, path, token=tokens["carol"])[2]) for path in API_ROUTES[:4]}
    assert carol["/api/duplicates"]["total"] == 0
    assert carol["/api/ledger"]["total"] == 0
    assert carol["/api/fences"]["total"] == 0
    assert carol["/api/overview"]["duplicates_by_risk"]["critical"] == 0
    assert carol["/api/overview"]["pending_classification"] == 0
    slot = "/api/timeline?dag_id=alice_nightly&task_id=load_0&partition=" + _partition(server)
    assert get(server, slot, token=tokens["carol"])[0] == 404
    assert get(server, slot, token=tokens["dave"])[0] == 200
    dave = {path: json.loads(get(server, path, token=tokens["dave"])[2]) for path in API_ROUTES[1:4]}
    assert {i["dag_id"] for i in dave["/api/duplicates"]["items"]} == {"alice_nightly", "alice_payouts"}
    assert {e["dag_id"] for e in dave["/api/fences"]["items"]} == {"alice_payouts"}
    assert dave["/api/ledger"]["total"] == 0  # vendor replies are what a task returned: XCom read


@pytest.fixture(scope="module")
def manual_runs(server: Server, tokens: dict[str, str]) -> None:
    """A manual run of alice_nightly and of bob_ledger; no scheduler runs, so both stay queued."""
    now = datetime.now(timezone.utc).isoformat()
    for dag in ("alice_nightly", "bob_ledger"):
        body = json.dumps({"dag_run_id": f"manual__risk_{dag}", "logical_date": now}).encode()
        request = urllib.request.Request(
            f"{server.url}/api/v2/dags/{dag}/dagRuns",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {tokens['admin']}"},
        )
        with urllib.request.urlopen(request, timeout=60) as resp:
            assert resp.status in (200, 201)


def test_runs_at_risk_follow_dag_and_task_instance_access(
    server: Server, tokens: dict[str, str], manual_runs: None
) -> None:
    """Each viewer sees the queued runs with a deadline of the DAGs whose task instances they may
    read: alice hers, bob his, carol (no task-instance read) none, the admin both."""

    def runs(user: str) -> list[dict[str, Any]]:
        status, _, body = get(server, "/api/runs-at-risk", token=tokens[user])
        assert status == 200, body
        return list(json.loads(body)["items"])

    alice = runs("alice")
    assert [(r["dag_id"], r["run_id"], r["deadline"]) for r in alice] == [
        ("alice_nightly", "manual__risk_alice_nightly", "alice_nightly_sla")
    ]
    assert alice[0]["state"] == "on_track"  # one task, no history: 300 s against two hours
    assert [(t["task_id"], t["remaining_seconds"]) for t in alice[0]["critical_path"]] == [("load_0", 300.0)]
    assert {r["dag_id"] for r in runs("bob")} == {"bob_ledger"}
    assert runs("carol") == []
    assert {r["dag_id"] for r in runs("admin")} == {"alice_nightly", "bob_ledger"}
    _, _, page = get(server, "/runs-at-risk", token=tokens["alice"])
    assert "manual__risk_alice_nightly" in page
    assert "bob_ledger" not in page
