"""The crashsafe UI in a real headless Chromium against a real api-server (one boot for the module).

Logs in through Airflow's own login page, opens "Crash safety" from Airflow's navigation, finds
the duplicates of a recorded crash inside the plugin's iframe and opens a slot's timeline; then
opens the crashed task instance's page in Airflow and clicks its "Attempts" tab; last, opens Runs
at risk with a queued run that has a deadline. Saves docs/screenshots/overview.png, timeline.png,
ti_attempts.png and runs_at_risk.png. Needs Debian's chromium and chromium-driver (never
downloads a browser) and selenium (a test dependency).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from airflow_crashsafe.store.store import open_store
from benchmarks.crash_records import seed_crash
from tests.integration.ui.server import MARKUP_TASK, PASSWORDS, Server, boot

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
#: Where the screenshots go: a temp dir, or docs/screenshots with CRASHSAFE_REFRESH_SCREENSHOTS=1
#: (how the README's pictures are refreshed), so a test run never changes the checkout.
SCREENSHOTS = (
    Path(__file__).resolve().parents[2] / "docs" / "screenshots"
    if os.environ.get("CRASHSAFE_REFRESH_SCREENSHOTS") == "1"
    else Path(tempfile.mkdtemp(prefix="crashsafe-screenshots-"))
)
WAIT = 30


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """api-server plus a live scheduler (so health is real), over a recorded crash."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium and chromium-driver", pytrace=False)
        pytest.skip("chromium / chromedriver not installed (apt-get install chromium chromium-driver)")
    with boot(tmp_path_factory.mktemp("ui-browser"), with_scheduler=True) as running:
        yield running


@pytest.fixture(scope="module")
def browser(server: Server) -> Iterator[Any]:
    """Headless Chromium driven by chromedriver, with a fresh profile; never Selenium Manager."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="crashsafe-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--window-size=1440,1000",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _wait(driver: Any, condition: Any) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT).until(condition)


def _login(driver: Any, server: Server, user: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    driver.get(f"{server.url}/auth/login/")
    _wait(driver, ec.presence_of_element_located((By.CSS_SELECTOR, "input[name='username']"))).send_keys(user)
    driver.find_element(By.CSS_SELECTOR, "input[type='password']").send_keys(PASSWORDS[user])
    driver.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
    _wait(driver, lambda d: "/auth/login" not in d.current_url and d.get_cookie("_token"))


def test_login_nav_duplicates_and_timeline(server: Server, browser: Any) -> None:
    """Alice logs in, opens Crash safety, sees her crash duplicates (escaped) and a timeline picture."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    _login(browser, server, "alice")
    nav = _wait(
        browser, ec.element_to_be_clickable((By.XPATH, "//a[.//text()[contains(., 'Crash safety')]]"))
    )
    nav.click()
    _wait(browser, lambda d: "/plugin/crashsafe" in d.current_url)
    frame = _wait(browser, ec.presence_of_element_located((By.TAG_NAME, "iframe")))
    browser.switch_to.frame(frame)
    _wait(browser, ec.presence_of_element_located((By.XPATH, "//h2[contains(., 'Duplicate executions')]")))
    cards = browser.find_element(By.CSS_SELECTOR, ".cards").text
    assert "critical" in cards
    assert "5" in cards
    assert "healthy" in browser.find_element(By.TAG_NAME, "table").text
    assert "45 s" in browser.page_source  # the outage window of the recorded crash
    browser.switch_to.default_content()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / "overview.png"))

    browser.switch_to.frame(browser.find_element(By.TAG_NAME, "iframe"))
    browser.find_element(By.LINK_TEXT, "Duplicates").click()
    table = _wait(browser, ec.presence_of_element_located((By.TAG_NAME, "table")))
    text = table.text
    assert "alice_nightly" in text
    assert "alice_payouts" in text
    assert "bob_ledger" not in browser.page_source
    assert MARKUP_TASK in text  # markup in a task id shows as text, not as an element
    assert browser.find_elements(By.CSS_SELECTOR, "td img") == []

    browser.find_element(
        By.XPATH, "//tr[td[contains(., 'alice_nightly')] and td[.='load_0']]//a[.='timeline']"
    ).click()
    svg = _wait(browser, ec.presence_of_element_located((By.TAG_NAME, "svg")))
    bars = svg.find_elements(By.CSS_SELECTOR, "rect[class^='bar-']")
    assert len(bars) == 2
    labels = svg.text
    assert "scheduler down 45s" in labels
    assert "overlap" in labels
    browser.switch_to.default_content()
    browser.save_screenshot(str(SCREENSHOTS / "timeline.png"))


def _create_run(server: Server, dag_id: str, run_id: str, logical_date: str) -> None:
    """The crashed run in Airflow's metadata (its DAG stays paused: nothing executes)."""
    body = json.dumps({"dag_run_id": run_id, "logical_date": logical_date}).encode()
    request = urllib.request.Request(
        f"{server.url}/api/v2/dags/{dag_id}/dagRuns",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {server.token('admin')}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            assert resp.status in (200, 201)
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"creating {run_id}: HTTP {exc.code} {exc.read()[:500]!r}") from exc


def test_task_instance_attempts_tab(server: Server, browser: Any) -> None:
    """On a crashed task instance's page in Airflow, the "Attempts" tab shows its slot's timeline."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    # Airflow reserves scheduled__ ids for its scheduler: record a crash of a manual run instead.
    store = open_store(f"sqlite:///{server.home.airflow_home / 'crashsafe.db'}")
    crash = seed_crash(
        store,
        ["alice_nightly"],
        tasks=1,
        now=datetime.now(timezone.utc) - timedelta(days=20),
        run_id="manual__{partition}",
    )
    store.close()
    partition = crash.partitions[0]
    run_id = f"manual__{partition}"
    _create_run(server, "alice_nightly", run_id, partition)
    browser.delete_all_cookies()
    _login(browser, server, "alice")
    browser.get(f"{server.url}/dags/alice_nightly/runs/{quote(run_id, safe='')}/tasks/load_0")
    tab = _wait(
        browser, ec.element_to_be_clickable((By.XPATH, "//a[.//text()[normalize-space(.)='Attempts']]"))
    )
    tab.click()
    _wait(browser, lambda d: "crashsafe-attempts" in d.current_url)
    frame = _wait(
        browser, ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[src*='crashsafe/timeline']"))
    )
    assert "run_id=" in str(frame.get_attribute("src"))
    browser.switch_to.frame(frame)
    svg = _wait(browser, ec.presence_of_element_located((By.TAG_NAME, "svg")))
    assert len(svg.find_elements(By.CSS_SELECTOR, "rect[class^='bar-']")) == 2
    assert "overlap" in svg.text
    assert "load_0" in browser.find_element(By.TAG_NAME, "h1").text
    browser.switch_to.default_content()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / "ti_attempts.png"))


def _pause(server: Server, dag_id: str) -> None:
    """Pause the DAG, so a run created now stays queued although the scheduler is alive."""
    request = urllib.request.Request(
        f"{server.url}/api/v2/dags/{dag_id}",
        data=json.dumps({"is_paused": True}).encode(),
        method="PATCH",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {server.token('admin')}"},
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 200


def test_runs_at_risk_page(server: Server, browser: Any) -> None:
    """Alice opens Runs at risk from the app's navigation: her queued run with a deadline, its
    forecast and its critical path; nothing of bob's."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    # alice_payouts never ran here: no history, so load_0 is forecast at the default 300 s.
    _pause(server, "alice_payouts")
    _create_run(server, "alice_payouts", "manual__risk", datetime.now(timezone.utc).isoformat())
    browser.delete_all_cookies()
    _login(browser, server, "alice")
    browser.get(f"{server.url}/crashsafe/")
    _wait(browser, ec.element_to_be_clickable((By.LINK_TEXT, "Runs at risk"))).click()
    row = _wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "tr.risk-row")))
    text = row.text
    assert "alice_payouts" in text
    assert "manual__risk" in text
    assert "alice_payouts_sla" in text
    assert "on track" in text
    assert "load_0" in row.find_element(By.CSS_SELECTOR, "ol.path").text
    assert "bob_ledger" not in browser.page_source
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / "runs_at_risk.png"))
