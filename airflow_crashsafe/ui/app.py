"""The UI's app factory: routers, security headers, its OpenAPI schema behind auth.

Built on the first request by :class:`~airflow_crashsafe.ui.lazy.LazyApp`. FastAPI's own
``/docs`` and ``/openapi.json`` are switched off because they would be routes without auth; the
schema is served at ``/api/openapi.json`` to authenticated users instead. Pages carry no script at
all, so the CSP forbids every script, fetches nothing from elsewhere and allows framing only by
the same origin (Airflow's UI shows the pages in a same-origin iframe).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import FastAPI, Request, Response
from fastapi.exception_handlers import http_exception_handler
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_crashsafe.ui.render import page
from airflow_crashsafe.ui.routes import duplicates, fences, ledger, overview, risk, runs_at_risk, timeline

__all__ = ["SECURITY_HEADERS", "create_app"]

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'self'"
    ),
    "X-Frame-Options": "SAMEORIGIN",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_PAGE_ERRORS = {
    401: ("Not signed in", "Sign in to Airflow, then open Crash safety from Airflow's navigation."),
    403: ("Not allowed", "Your Airflow user may not see this page."),
    404: ("Not found", "Nothing recorded here that you may see."),
}


async def _security_headers(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    response = await call_next(request)
    response.headers.update(SECURITY_HEADERS)
    return response


async def _errors(request: Request, exc: Exception) -> Response:
    """JSON under ``/api``; a small escaped page elsewhere (a browser landed there)."""
    assert isinstance(exc, StarletteHTTPException)
    root, path = request.scope.get("root_path", ""), request.url.path
    if path.startswith(root):
        path = path[len(root) :]
    if path.startswith("/api") or exc.status_code not in _PAGE_ERRORS:
        return await http_exception_handler(request, exc)
    title, message = _PAGE_ERRORS[exc.status_code]
    response = page(
        request, "error.html", status_code=exc.status_code, active=None, title=title, message=message
    )
    if exc.headers:
        response.headers.update(exc.headers)
    return response


def create_app() -> FastAPI:
    """The crashsafe UI and its JSON API; every route depends on an authenticated Airflow user."""
    app = FastAPI(
        title="airflow-crashsafe",
        description=(
            "Runs at risk of missing their deadline, duplicate executions, attempt timelines, "
            "the idempotency ledger and fence events."
        ),
        version="1",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.middleware("http")(_security_headers)
    app.add_exception_handler(StarletteHTTPException, _errors)
    for module in (overview, runs_at_risk, duplicates, timeline, ledger, fences, risk):
        app.include_router(module.router)

    @app.get("/api/openapi.json", include_in_schema=False)
    def openapi_schema(user: GetUserDep) -> dict[str, Any]:
        """This API's OpenAPI schema (for authenticated users, like everything else here)."""
        return app.openapi()

    return app
