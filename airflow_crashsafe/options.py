"""The ``[crashsafe]`` options, declared once: name, description, type, example and default.

Provider info publishes this table (so ``airflow config list`` shows the options), the README
documents it (a test keeps the two in step), and :mod:`airflow_crashsafe.config` reads each
option through one cached accessor. Every ``float`` and ``integer`` option also has its range in
:data:`LIMITS`, which the accessors check (a nan, infinite or out-of-range value is refused by
name). Data only: nothing here reads configuration.
"""

from __future__ import annotations

from airflow_crashsafe.limits import DAY, HOUR, Limit

__all__ = ["LIMITS", "OPTIONS"]

#: A century: a retention longer than this is as good as forever (and still fits a ``timedelta``).
_FOREVER_DAYS = 36500

#: Declared in provider info (``config`` section) and the README; read by :mod:`airflow_crashsafe.config`.
OPTIONS: dict[str, dict[str, str | bool | None]] = {
    "conn_id": {
        "description": "Airflow connection of the crashsafe store (PostgreSQL in production). When "
        "no such connection exists, an embedded SQLite file under $AIRFLOW_HOME is used instead "
        "(single machine only; refused when [core] executor runs tasks on several hosts).",
        "type": "string",
        "example": "crashsafe_default",
        "default": "crashsafe_default",
        "version_added": "0.1.0",
    },
    "embedded_path": {
        "description": "Path of the embedded SQLite store used when the store connection does not "
        "exist. Empty means $AIRFLOW_HOME/crashsafe.db.",
        "type": "string",
        "example": "/opt/airflow/crashsafe.db",
        "default": "",
        "version_added": "0.1.0",
    },
    "allow_embedded_store_on_fleet": {
        "description": "Whether a process may fall back to the embedded SQLite store although [core] "
        "executor can run tasks on several hosts (CeleryExecutor, KubernetesExecutor, EdgeExecutor, an "
        "unknown executor). Off: it refuses, because each host's own file would split the ledger and the "
        "fences. Turn it on only when every task really runs on this one host.",
        "type": "boolean",
        "example": "False",
        "default": "False",
        "version_added": "0.1.0",
    },
    "store_connect_timeout_seconds": {
        "description": "The most opening a connection to the crashsafe store may take; a store that "
        "accepts and never answers fails the task with a StoreError after it (PostgreSQL's "
        "connect_timeout, at least 2 s).",
        "type": "float",
        "example": "10",
        "default": "10",
        "version_added": "0.1.0",
    },
    "store_statement_timeout_seconds": {
        "description": "The most one statement against the crashsafe store may take (PostgreSQL's "
        "statement_timeout; SQLite's busy timeout); past it the statement fails with a StoreError.",
        "type": "float",
        "example": "30",
        "default": "30",
        "version_added": "0.1.0",
    },
    "audit_retention_days": {
        "description": "How many days `airflow-crashsafe db prune` keeps events, attempt records, "
        "finished units and idle fence rows (--older-than overrides it; at least 1). 0: prune only "
        "when --older-than is given.",
        "type": "integer",
        "example": "90",
        "default": "90",
        "version_added": "0.1.0",
    },
    "ledger_retention_days": {
        "description": "How many days idempotency-ledger entries are kept; `airflow-crashsafe "
        "ledger prune` deletes older ones, with their calls' fence rows. A retry later than this "
        "re-sends its call.",
        "type": "integer",
        "example": "30",
        "default": "30",
        "version_added": "0.1.0",
    },
    "in_flight_wait_seconds": {
        "description": "How long a new attempt waits for an older attempt's external call that the "
        "ledger shows still in flight (intent recorded, no outcome yet), to adopt its result instead "
        "of treating the outcome as unknown. Airflow kills a reset attempt within about 10 s.",
        "type": "float",
        "example": "15",
        "default": "15",
        "version_added": "0.1.0",
    },
    "ledger_spin_wait_ms": {
        "description": "How long a process waits on the CPU for the store's answer to one of the "
        "ledger's two per-call statements before it sleeps. A local store answers well within it, and "
        "on virtual machines a CPU that went idle runs slower for a while after. 0 always sleeps.",
        "type": "float",
        "example": "0",
        "default": "2",
        "version_added": "0.1.0",
    },
    "adopt_in_flight": {
        "description": "Whether a crashsafe SQL write that finds its predecessor's unit still running "
        "server-side (PostgreSQL) waits for it (deferred while a triggerer heartbeats) and adopts its "
        "commit instead of cancelling it and redoing the work. Operators' adopt_in_flight argument "
        "overrides it.",
        "type": "boolean",
        "example": "True",
        "default": "True",
        "version_added": "0.1.0",
    },
    "adoption_timeout_seconds": {
        "description": "How long a re-run waits for its predecessor's in-flight unit before cancelling "
        "it and taking the slot over. Operators' adoption_timeout argument overrides it.",
        "type": "float",
        "example": "21600",
        "default": "21600",
        "version_added": "0.1.0",
    },
    "adoption_without_triggerer": {
        "description": "What a re-run does about its predecessor's in-flight unit when no triggerer "
        "heartbeats (read from the api-server's health at api_url), so a deferral would not be "
        "answered: wait (poll the unit's end from the worker, holding its slot, up to the adoption "
        "timeout) or take_over (cancel the unit and redo the work). Operators' "
        "adoption_without_triggerer argument overrides it.",
        "type": "string",
        "example": "wait",
        "default": "wait",
        "version_added": "0.1.0",
    },
    "triggerer_answer_seconds": {
        "description": "How often a heartbeating triggerer must answer a re-run deferred on its "
        "predecessor's in-flight unit: the trigger checks in at this interval (the task resumes, "
        "looks at the unit and defers anew), and a deferral left unanswered for twice this long "
        "(a triggerer that heartbeats but runs no trigger) is ended by the scheduler's deferral "
        "timeout; the re-run then waits in the worker or takes over, as adoption_without_triggerer "
        "says, and its log says which.",
        "type": "float",
        "example": "300",
        "default": "300",
        "version_added": "0.1.0",
    },
    "on_kill_unit": {
        "description": "What on_kill does to a crashsafe SQL write running server-side: leave (it "
        "commits if still the newest attempt, and a re-run adopts it) or cancel. Operators' "
        "on_kill_unit argument overrides it.",
        "type": "string",
        "example": "leave",
        "default": "leave",
        "version_added": "0.1.0",
    },
    "recovery_concurrency": {
        "description": "Recovery budget: how many re-runs that must redo work after a reset, a heartbeat "
        "timeout or a lost worker may work on one resource (by default their target connection) at "
        "once; the others wait, deferred or in the worker, and are admitted by deadline, then by how "
        "much depends on them. First tries are never delayed. Operators' recovery_concurrency "
        "argument overrides it. 0 turns admission off.",
        "type": "integer",
        "example": "4",
        "default": "4",
        "version_added": "0.1.0",
    },
    "recovery_lease_seconds": {
        "description": "How long a recovery place outlives its holder's last sign of life (holders "
        "refresh it several times within this bound). A holder on this host frees its place as soon "
        "as its process is gone; one on another host after this long.",
        "type": "float",
        "example": "60",
        "default": "60",
        "version_added": "0.1.0",
    },
    "recovery_wait_seconds": {
        "description": "The most a recovery re-run waits for a place (deferred or in the worker) before "
        "it goes ahead over the budget, with a warning in its log.",
        "type": "float",
        "example": "3600",
        "default": "3600",
        "version_added": "0.1.0",
    },
    "audit_enabled": {
        "description": "Whether the listener records every attempt's start and end in the store.",
        "type": "boolean",
        "example": "True",
        "default": "True",
        "version_added": "0.1.0",
    },
    "audit_timeout_seconds": {
        "description": "The most an audit event may delay a task; a slower store gets the event "
        "spooled locally under $AIRFLOW_HOME/crashsafe-spool and delivered later.",
        "type": "float",
        "example": "0.5",
        "default": "0.5",
        "version_added": "0.1.0",
    },
    "audit_beacon_seconds": {
        "description": "How often a running attempt refreshes its last-seen time, so an attempt "
        "killed without any hook still shows how long it really ran.",
        "type": "float",
        "example": "5",
        "default": "5",
        "version_added": "0.1.0",
    },
    "api_url": {
        "description": "Root URL of the api-server as workers reach it, for the heartbeat sensor and the "
        "alerting DAG. Empty: the root of [core] execution_api_server_url, else [api] base_url, "
        "else http://localhost:8080.",
        "type": "string",
        "example": "http://airflow-api:8080",
        "default": "",
        "version_added": "0.1.0",
    },
    "api_conn_id": {
        "description": "HTTP connection to Airflow's REST API (host, login/password or extra "
        '{"token": ...}) used by the alerting DAG for stuck tasks, audit reconciliation and HA '
        "replicas; without it those checks are skipped with a warning.",
        "type": "string",
        "example": "crashsafe_api",
        "default": "crashsafe_api",
        "version_added": "0.1.0",
    },
    "dead_mans_switch_url": {
        "description": "URL the alerting DAG pings every run (healthchecks.io etc.); the external "
        "monitor pages when the pings stop, even when all of Airflow is down.",
        "type": "string",
        "example": "https://hc-ping.com/<uuid>",
        "default": "",
        # The URL is the credential (anyone holding it can ping): masked in `airflow config list`,
        # and settable as AIRFLOW__CRASHSAFE__DEAD_MANS_SWITCH_URL_CMD / _SECRET.
        "sensitive": True,
        "version_added": "0.1.0",
    },
    "alerting_config": {
        "description": "TOML/JSON file with [[sinks]] (the watchdog's format) through which the alerting DAG "
        "alerts.",
        "type": "string",
        "example": "/etc/crashsafe/alerting.toml",
        "default": "",
        "version_added": "0.1.0",
    },
    "deadlines_config": {
        "description": "TOML/JSON file with [[deadlines]] (the watchdog's --config file can be given: "
        "other tables are ignored, [watch]'s deadline_keep, deadline_default_duration and "
        "deadline_history are used). The UI's Runs at risk page shows the queued and running runs "
        "these deadlines watch, with Airflow's own DeadlineAlert deadlines. Empty: Airflow's only.",
        "type": "string",
        "example": "/etc/crashsafe/watchdog.toml",
        "default": "",
        "version_added": "0.1.0",
    },
    "alert_notifiers": {
        "description": "Airflow Notifiers the alerting DAG alerts through, beside alerting_config's sinks: a "
        'JSON list of {"class": <import path>, "kwargs": {...}} (connection ids go in kwargs).',
        "type": "string",
        "example": '[{"class": "airflow.providers.smtp.notifications.smtp.SmtpNotifier", '
        '"kwargs": {"to": "ops@example.com", "smtp_conn_id": "smtp_default"}}]',
        "default": "",
        "version_added": "0.1.0",
    },
    "alerting_state_dir": {
        "description": "Where the alerting DAG keeps incidents and its alert outbox. Empty means "
        "$AIRFLOW_HOME/crashsafe-alerting.",
        "type": "string",
        "example": "/var/lib/crashsafe",
        "default": "",
        "version_added": "0.1.0",
    },
    "policy_mode": {
        "description": "What the cluster policy airflow_crashsafe.policy.task_policy (hooked in from "
        "airflow_local_settings.py) does with each task when a DAG file is parsed: off (nothing), "
        "warn (log each task a re-run would harm, with its fix, and record it for the UI's risk map), "
        "enforce (refuse a DAG with such a task unless it is protected or declared with replay_safe "
        "and a reason), or protect (warn, and give an HttpOperator with a mutating method an "
        "idempotency key and the ledger, and fence a SQLExecuteQueryOperator whose single statement "
        "writes one known table; see docs/scan.md).",
        "type": "string",
        "example": "warn",
        "default": "off",
        "version_added": "0.1.0",
    },
    "alerting_instance": {
        "description": "Name of this Airflow in the alerting DAG's alerts. Empty means <api host>/<dag_id>.",
        "type": "string",
        "example": "prod-eu",
        "default": "",
        "version_added": "0.1.0",
    },
}


#: What each numeric option may be. Timeouts and waits stop at a day or a week: past that a store
#: or a predecessor is gone, and a wait that long only hides it.
LIMITS: dict[str, Limit] = {
    "store_connect_timeout_seconds": Limit(0, HOUR, above=True),
    "store_statement_timeout_seconds": Limit(0, DAY, above=True),
    "audit_retention_days": Limit(0, _FOREVER_DAYS, integer=True, unit="days"),
    "ledger_retention_days": Limit(1, _FOREVER_DAYS, integer=True, unit="days"),
    "in_flight_wait_seconds": Limit(0, DAY),
    "ledger_spin_wait_ms": Limit(0, 1000, unit="milliseconds"),
    "adoption_timeout_seconds": Limit(0, 7 * DAY),
    "triggerer_answer_seconds": Limit(0, DAY, above=True),
    "recovery_concurrency": Limit(0, 10_000, integer=True, unit="places"),
    "recovery_lease_seconds": Limit(1, DAY),
    "recovery_wait_seconds": Limit(0, 7 * DAY),
    "audit_timeout_seconds": Limit(0, HOUR, above=True),
    "audit_beacon_seconds": Limit(0, HOUR, above=True),
}
