"""Boot one real Airflow api-server with the crashsafe plugin, users, DAGs and a recorded crash.

Used module-scoped (booting costs ~20-40 s on 2 cores). The metadata DB is SQLite; the crashsafe
store is the embedded SQLite file ``[crashsafe] embedded_path`` points at (what a single-machine
install uses). The crash is recorded through the audit's own writer (:mod:`crash_records`) and
the scheduler outage is written into Airflow's ``job`` table as a SIGKILLed scheduler leaves it:
a ``running`` SchedulerJob whose heartbeat stopped, then the restarted one.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_crashsafe.store.store import open_store
from benchmarks.crash_records import Crash, seed_crash, seed_protection_records
from drill.airflow_home import DrillHome, component_env
from drill.components import Component, health, kill_drill_processes, wait_until

__all__ = ["DAGS", "PASSWORDS", "Server", "boot"]

DAGS = ("alice_nightly", "alice_payouts", "bob_ledger")
PASSWORDS = {
    "alice": "alice-pw-1",
    "bob": "bob-pw-2",
    "admin": "admin-pw-3",
    "carol": "carol-pw-4",
    "dave": "dave-pw-5",
}
#: carol and dave read alice's DAGs too, but carol not their task instances, dave not their XComs.
ACL = {"alice": ["alice_"], "bob": ["bob_"], "carol": ["alice_"], "dave": ["alice_"]}
ENTITY_DENY = {"carol": ["TASK_INSTANCE"], "dave": ["XCOM"]}
MARKUP_TASK = "<img src=x onerror=alert(1)>"


@dataclass
class Server:
    home: DrillHome
    crash: Crash
    components: list[Component] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.home.api_url

    def token(self, user: str) -> str:
        """A JWT from ``POST /auth/token`` (the SimpleAuthManager login)."""
        body = json.dumps({"username": user, "password": PASSWORDS[user]}).encode()
        request = urllib.request.Request(
            f"{self.url}/auth/token", data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            return str(json.loads(resp.read())["access_token"])


def _write_dags(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for dag_id in DAGS:
        (folder / f"{dag_id}.py").write_text(
            textwrap.dedent(
                f"""
                from airflow.sdk import DAG
                from airflow.providers.standard.operators.empty import EmptyOperator

                with DAG({dag_id!r}, schedule=None):
                    EmptyOperator(task_id="load_0")
                """
            )
        )


def _write_deadlines(folder: Path) -> Path:
    """``[[deadlines]]`` two hours from now for manual runs of three DAGs (the Runs at risk page
    shows the runs the tests trigger)."""
    at = (datetime.now(timezone.utc) + timedelta(hours=2)).strftime("%H:%M")
    path = folder / "watchdog.toml"
    entry = '[[deadlines]]\nname = "{dag}_sla"\ndag_id = "{dag}"\nat = "{at}"\nrun_types = ["manual"]\n\n'
    path.write_text(
        "".join(entry.format(dag=dag, at=at) for dag in ("alice_nightly", "alice_payouts", "bob_ledger"))
    )
    return path


def _stamp(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def _seed_scheduler_jobs(db: Path, crash: Crash) -> None:
    with sqlite3.connect(db) as conn:
        for start, beat in (
            (crash.first_scheduler_started, crash.killed_at),
            (crash.restarted_at, datetime.now(timezone.utc)),
        ):
            conn.execute(
                "INSERT INTO job (state, job_type, start_date, latest_heartbeat, executor_class,"
                " hostname, unixname)"
                " VALUES ('running', 'SchedulerJob', ?, ?, 'LocalExecutor', 'scheduler-1', 'airflow')",
                (_stamp(start), _stamp(beat)),
            )


def _run(argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


@contextmanager
def boot(tmp: Path, *, with_scheduler: bool = False) -> Iterator[Server]:
    """A running api-server (and scheduler if asked) over seeded DAGs, users and crash records."""
    home = DrillHome.create(str(tmp))
    dags = home.root / "dags"
    _write_dags(dags)
    (home.airflow_home / "simple_auth_manager_passwords.json.generated").write_text(json.dumps(PASSWORDS))
    env = component_env(
        home,
        dags_folder=dags,
        metadata_url=f"sqlite:///{home.metadata_sqlite}",
        extra={
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(
                f"{user}:{'admin' if user == 'admin' else 'viewer'}" for user in PASSWORDS
            ),
            "AIRFLOW__CORE__AUTH_MANAGER": "tests.integration.ui.acl_auth_manager.AclAuthManager",
            "CRASHSAFE_TEST_DAG_ACL": json.dumps(ACL),
            "CRASHSAFE_TEST_ENTITY_DENY": json.dumps(ENTITY_DENY),
            "AIRFLOW__CRASHSAFE__DEADLINES_CONFIG": str(_write_deadlines(home.root)),
        },
    )
    airflow = str(Path(sys.executable).parent / "airflow")
    _run([airflow, "db", "migrate"], env)
    _run([airflow, "dags", "reserialize"], env)
    store = open_store(f"sqlite:///{home.airflow_home / 'crashsafe.db'}")
    crash = seed_crash(store, list(DAGS), tasks=2)
    seed_crash(store, ["alice_nightly"], tasks=1, task_name=MARKUP_TASK)
    seed_protection_records(store, "alice_payouts", task_id="pay", marker="<script>alert('vendor')</script>")
    seed_protection_records(store, "bob_ledger", task_id="post", marker="bob-only")
    store.close()
    _seed_scheduler_jobs(home.metadata_sqlite, crash)
    server = Server(home=home, crash=crash)
    names = ["api-server", "scheduler"] if with_scheduler else ["api-server"]
    try:
        for name in names:
            component = Component(name, [airflow, name], env, home.logs / f"{name}.log")
            component.start()
            server.components.append(component)
        wait_until("the api-server", lambda: health(home.api_url), timeout=180)
        if with_scheduler:
            wait_until(
                "a healthy scheduler",
                lambda: (health(home.api_url) or {}).get("scheduler", {}).get("status") == "healthy",  # type: ignore[union-attr]
                timeout=120,
            )
        yield server
    except BaseException:
        for component in server.components:
            print(f"--- {component.name} log ---\n{component.tail(60)}")
        raise
    finally:
        sessions = {c.pid for c in server.components if c.pid}
        for component in server.components:
            component.kill_group()
        kill_drill_processes(sessions, home.airflow_home)
        if not os.environ.get("CRASHSAFE_KEEP_UI_HOME"):
            home.remove()
