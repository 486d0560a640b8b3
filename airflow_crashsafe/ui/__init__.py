"""The crashsafe UI: a FastAPI app the plugin mounts at ``/crashsafe``.

Airflow imports the plugin module in every process, task runners included, so this package only
describes the app: :data:`FASTAPI_APPS` holds a :class:`~airflow_crashsafe.ui.lazy.LazyApp` that
imports FastAPI, the store and the templates on the first request the api-server routes to it,
and :data:`EXTERNAL_VIEWS` lists it in Airflow's navigation and on the task-instance page.
"""

from __future__ import annotations

from airflow_crashsafe.ui.lazy import LazyApp

__all__ = ["EXTERNAL_VIEWS", "FASTAPI_APPS", "URL_PREFIX"]

#: Where the api-server mounts the app; not under Airflow's reserved prefixes (/api/v2, /ui, ...).
URL_PREFIX = "/crashsafe"

FASTAPI_APPS: list[dict[str, object]] = [
    {"app": LazyApp("airflow_crashsafe.ui.app:create_app"), "url_prefix": URL_PREFIX, "name": "crashsafe"}
]

# Hrefs are relative: Airflow's UI resolves them against its <base href>, so a non-root
# [api] base_url keeps working. The iframe is same-origin, so the session cookie reaches the app.
EXTERNAL_VIEWS: list[dict[str, object]] = [
    {
        "name": "Crash safety",
        "href": "crashsafe/",
        "destination": "nav",
        "url_route": "crashsafe",
        "nav_top_level": True,
    },
    {
        "name": "Attempts",
        "href": (
            "crashsafe/timeline?dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}&map_index={MAP_INDEX}"
        ),
        "destination": "task_instance",
        "url_route": "crashsafe-attempts",
    },
]
