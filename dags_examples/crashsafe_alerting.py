"""The in-Airflow alerting DAG and canary (see ``airflow_crashsafe.dags.alerting``).

Copy this file into your DAGs folder. Configure it through ``[crashsafe]`` options (or pass the
same settings as arguments here):

* ``dead_mans_switch_url``: pinged every minute; the external monitor pages when pings stop;
* ``alerting_config``: a TOML/JSON file with ``[[sinks]]``, the same format as the watchdog's;
* an HTTP connection ``crashsafe_api`` to the api-server's REST API (login/password or extra
  ``{"token": ...}``) for the stuck-task check, the audit reconciliation and HA replicas.

Then run the watchdog with ``--canary-dag-id crashsafe_alerting --canary-max-age 600``.
"""

from __future__ import annotations

from airflow_crashsafe.dags import build_alerting_dag

dag = build_alerting_dag()
