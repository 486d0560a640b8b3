"""Server-side HTML: Jinja2 with autoescape on for every template, and base-URL-aware links.

Everything on a page that came from a task or a vendor (ids, hostnames, response bodies, error
texts) is a template variable, so it is escaped: markup in a task id renders as text. Links are
this app's route paths under the mount's root path (``/crashsafe``, behind any
``[api] base_url`` prefix), and are emitted as paths so a proxy's host name never matters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any, Protocol
from urllib.parse import urlencode

from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader

from airflow_crashsafe.ui.access import Reader

__all__ = ["Listing", "link", "list_page", "page", "reset_templates"]


@cache
def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("airflow_crashsafe.ui", "templates"),
        autoescape=True,  # every template, whatever its file name
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["span"] = _span
    env.filters["as_json"] = lambda v: json.dumps(v, indent=1, sort_keys=True, default=str)
    return env


def reset_templates() -> None:
    """Forget the loaded templates, as a freshly started api-server has none (benchmarks time that)."""
    _env.cache_clear()


def _when(value: datetime | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value[:19].replace("T", " ")
    return value.strftime("%Y-%m-%d %H:%M:%S")


def _span(seconds: float | None, signed: bool = False) -> str:
    """Seconds as ``1 h 05 min`` / ``4 min 10 s`` (``signed``: with ``+`` or ``-``)."""
    if seconds is None:
        return "-"
    sign = ("-" if seconds < 0 else "+") if signed else ""
    left = round(abs(seconds))
    hours, rest = divmod(left, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{sign}{hours} h {minutes:02d} min"
    return f"{sign}{minutes} min {secs:02d} s" if minutes else f"{sign}{secs} s"


def link(request: Request, name: str, /, **params: Any) -> str:
    """Path (and query) of the route ``name`` in this app, with ``None`` parameters left out."""
    # Not request.url_for: Airflow mounts this app behind a LazyApp, so the root router (which
    # url_for asks) cannot see these routes. This app's own router, under the mount's root path, can.
    path = request.scope.get("root_path", "") + request.app.url_path_for(name)
    query = {k: v for k, v in params.items() if v is not None and v != ""}
    return f"{path}?{urlencode(query)}" if query else path


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render ``template`` with ``request`` and a bound ``link`` available to it."""
    html = (
        _env()
        .get_template(template)
        .render(request=request, link=lambda name, **p: link(request, name, **p), **context)
    )
    return HTMLResponse(html, status_code=status_code)


class Listing(Protocol):
    """What a list route found: one page of ``items`` and how many there are in all."""

    @property
    def total(self) -> int: ...

    @property
    def items(self) -> Sequence[Any]: ...


def list_page(
    name: str,
    request: Request,
    user: BaseUser,
    reader: Reader,
    found: Listing,
    filters: Mapping[str, Any],
    **choices: Any,
) -> HTMLResponse:
    """The list page ``name`` (template ``name.html``, route ``name_page``): the readable DAGs and
    ``choices`` to filter on, the filters applied (``f``, the DAG's included) and what was found."""
    return page(
        request,
        f"{name}.html",
        active=f"{name}_page",
        user_name=user.get_name(),
        dags=sorted(reader.allowed),
        f={"dag_id": reader.dag_id, **filters},
        total=found.total,
        items=found.items,
        **choices,
    )
