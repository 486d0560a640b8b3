"""Who a metadata-DB session belongs to: the identity Airflow's components carry in ``application_name``.

PostgreSQL cannot name the process behind a session, and a scheduler killed inside its critical
section leaves a session its forked children keep open. So that the watchdog can prove such a
session is a dead scheduler's — and never a person's, an HA replica's or another component's —
the plugin makes every scheduler, triggerer and dag-processor name its own metadata sessions
(:mod:`~airflow_crashsafe.component_identity.listener`), in a format the watchdog parses without
Airflow (:mod:`~airflow_crashsafe.component_identity.name`). See docs/design.md, "Watchdog and
alerting".
"""

from __future__ import annotations

__all__: list[str] = []
