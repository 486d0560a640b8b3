"""The UI in process: per-user filtering, escaping, headers, auth on every route, the plugin's cost."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from airflow_crashsafe.ui import EXTERNAL_VIEWS, FASTAPI_APPS, URL_PREFIX
from airflow_crashsafe.ui.health import JobSpan
from benchmarks.crash_records import seed_crash, seed_protection_records
from tests.unit.ui.conftest import UiHarness

MARKUP = "<b onmouseover=x>load</b>"


@pytest.fixture
def crashed(ui: UiHarness) -> UiHarness:
    """Two DAGs hit by one crash; alice may read only ``alice_nightly``."""
    crash = seed_crash(ui.store, ["alice_nightly", "bob_ledger"], tasks=2)
    seed_crash(ui.store, ["alice_nightly"], tasks=1, task_name=MARKUP)
    seed_protection_records(ui.store, "alice_nightly", task_id="pay", marker="<script>alert(1)</script>")
    seed_protection_records(ui.store, "bob_ledger", task_id="post", marker="bob")
    ui.allowed = {"alice_nightly"}
    ui.spans = [
        JobSpan(crash.first_scheduler_started, crash.killed_at),
        JobSpan(crash.restarted_at, datetime.now(timezone.utc)),
    ]
    return ui


def test_every_route_depends_on_an_authenticated_user(ui: UiHarness) -> None:
    """No route of the app lacks Airflow's user dependency (FastAPI's own docs are switched off)."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.routing import APIRoute

    def calls(dependant: object) -> set[object]:
        deps = getattr(dependant, "dependencies", [])
        return {d.call for d in deps} | {c for d in deps for c in calls(d)}

    routes = [r for r in ui.app.routes if isinstance(r, APIRoute)]
    assert len(routes) == 15
    assert all(get_user in calls(r.dependant) for r in routes), [r.path for r in routes]
    assert ui.app.openapi_url is None
    assert ui.app.docs_url is None


@pytest.mark.parametrize(
    "path", ["/", "/duplicates", "/ledger", "/fences", "/api/overview", "/api/openapi.json"]
)
def test_anonymous_gets_401(crashed: UiHarness, path: str) -> None:
    """Without a user every page and JSON route refuses, and shows no DAG."""
    crashed.user = None
    response = crashed.get(path)
    assert response.status_code == 401
    assert "alice_nightly" not in response.text


def test_lists_hold_only_readable_dags(crashed: UiHarness) -> None:
    """Duplicates, ledger, fences and the overview's counts cover alice_nightly only."""
    dups = crashed.get("/api/duplicates").json()
    assert {i["dag_id"] for i in dups["items"]} == {"alice_nightly"}
    assert dups["total"] == 3
    assert crashed.get("/api/overview").json()["duplicates_by_risk"]["critical"] == 3
    assert {e["dag_id"] for e in crashed.get("/api/ledger").json()["items"]} == {"alice_nightly"}
    assert {e["dag_id"] for e in crashed.get("/api/fences").json()["items"]} == {"alice_nightly"}
    for page in ("/", "/duplicates", "/ledger", "/fences"):
        assert "bob_ledger" not in crashed.get(page).text, page


def test_filters_by_dag_risk_and_time(crashed: UiHarness) -> None:
    """A foreign DAG filter yields nothing; risk and day filters narrow the list."""
    assert crashed.get("/api/duplicates", dag_id="bob_ledger").json()["total"] == 0
    assert crashed.get("/api/duplicates", risk="high").json()["total"] == 0
    assert crashed.get("/api/duplicates", risk="critical", days=1).json()["total"] == 3


def test_a_foreign_dag_filter_empties_every_list(crashed: UiHarness) -> None:
    """Asking a list for a DAG the user may not read gives nothing, in the JSON and on the page."""
    for path in ("/api/duplicates", "/api/ledger", "/api/fences"):
        assert crashed.get(path, dag_id="bob_ledger").json()["total"] == 0, path
    for page in ("/duplicates", "/ledger", "/fences"):
        assert "<td>alice_nightly" in crashed.get(page).text, page
        response = crashed.get(page, dag_id="bob_ledger")
        assert response.status_code == 200
        assert "<td>alice_nightly" not in response.text, page


def test_markup_renders_as_text_and_secrets_are_masked(crashed: UiHarness) -> None:
    """Task ids and vendor bodies are escaped; a token in a vendor reply and the request never show."""
    page = crashed.get("/duplicates").text
    assert MARKUP not in page
    assert "&lt;b onmouseover=x&gt;load&lt;/b&gt;" in page
    ledger = crashed.get("/ledger").text
    assert "<script>" not in ledger
    assert "&lt;script&gt;" in ledger
    assert "s3cr3t" not in ledger
    assert "request-body-xyz" not in ledger
    assert crashed.get("/api/ledger").json()["items"][0]["result"]["access_token"] == "***"


def test_security_headers(crashed: UiHarness) -> None:
    """Same-origin framing only, no script allowed, nothing cached."""
    headers = crashed.get("/").headers
    assert "frame-ancestors 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "SAMEORIGIN"


def test_timeline_shows_overlap_and_outage(crashed: UiHarness) -> None:
    """The task-instance tab's URL (by run) draws two bars, the overlap and the scheduler outage."""
    run = crashed.get("/api/duplicates").json()["items"][0]["executions"][0]["run_id"]
    api = crashed.get("/api/timeline", dag_id="alice_nightly", task_id="load_0", run_id=run, map_index=-1)
    assert api.status_code == 200
    body = api.json()
    assert len(body["executions"]) == 2
    assert body["reruns"][0]["overlap_seconds"] > 0
    assert body["outages"][0]["seconds"] == 45
    html = crashed.get("/timeline", dag_id="alice_nightly", task_id="load_0", run_id=run).text
    assert html.count('<rect class="bar-') == 2
    assert "scheduler down 45s" in html
    assert "overlap " in html


def test_unmapped_task_instance_tab_with_airflows_unfilled_map_index(crashed: UiHarness) -> None:
    """Airflow leaves {MAP_INDEX} as written on an unmapped task's tab: it means -1; junk is a 422."""
    run = crashed.get("/api/duplicates").json()["items"][0]["executions"][0]["run_id"]
    tab = crashed.get(
        "/timeline", dag_id="alice_nightly", task_id="load_0", run_id=run, map_index="{MAP_INDEX}"
    )
    assert tab.status_code == 200
    assert tab.text.count('<rect class="bar-') == 2
    junk = crashed.get("/api/timeline", dag_id="alice_nightly", task_id="load_0", run_id=run, map_index="x1")
    assert junk.status_code == 422
    assert "map_index must be an integer" in junk.text


def test_foreign_timeline_is_a_plain_404(crashed: UiHarness) -> None:
    """bob's slot and a slot that never existed answer alike, so bob's DAG id cannot be probed."""
    part = crashed.get("/api/duplicates").json()["items"][0]["partition"]
    foreign = crashed.get("/api/timeline", dag_id="bob_ledger", task_id="load_0", partition=part)
    missing = crashed.get("/api/timeline", dag_id="nothing", task_id="load_0", partition=part)
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json() == missing.json()


def test_links_carry_the_mount_prefix(crashed: UiHarness) -> None:
    """Navigation and timeline links are paths under /crashsafe, whatever host the proxy used."""
    page = crashed.get("/duplicates").text
    assert 'href="/crashsafe/ledger"' in page
    assert 'href="/crashsafe/timeline?dag_id=alice_nightly' in page


def test_plugin_views_and_prefix() -> None:
    """A non-reserved prefix; a top-level nav item and a task-instance tab with relative hrefs."""
    assert FASTAPI_APPS[0]["url_prefix"] == URL_PREFIX == "/crashsafe"
    assert [v["destination"] for v in EXTERNAL_VIEWS] == ["nav", "task_instance"]
    assert all(not str(v["href"]).startswith("/") for v in EXTERNAL_VIEWS)


@pytest.mark.slow
def test_plugin_import_builds_no_app() -> None:
    """Importing the plugin (every Airflow process does) imports neither FastAPI nor the UI's routes."""
    code = (
        "import sys, airflow_crashsafe.plugin as p; "
        "print(sorted(m for m in sys.modules if m == 'fastapi' or m.startswith('airflow_crashsafe.ui.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "['airflow_crashsafe.ui.lazy']"


def test_outages_merge_replicas_and_report_a_stale_heartbeat() -> None:
    """Overlapping HA spans are no outage; a gap over the grace is; a silent last scheduler is ongoing."""
    from airflow_crashsafe.ui.health import outages

    t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    s = timedelta(seconds=1)
    spans = [JobSpan(t, t + 100 * s), JobSpan(t + 50 * s, t + 200 * s), JobSpan(t + 260 * s, t + 400 * s)]
    found = outages(spans, now=t + 500 * s, since=t, grace=30 * s)
    assert [(o.started_at, o.ended_at, o.ongoing) for o in found] == [
        (t + 200 * s, t + 260 * s, False),
        (t + 400 * s, None, True),
    ]
