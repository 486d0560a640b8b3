"""POST requests that only read: token requests, searches and queries, health and heartbeat pings.

Many APIs take a read as a POST because the question does not fit in a URL: an OAuth token
request (``grant_type=client_credentials`` to ``/oauth2/token``), a search (Elasticsearch
``_search``, ``/search``, ``/query``), a GraphQL query, a heartbeat (``/ping``, ``/health``).
Sending one twice changes nothing a reader cares about, and wrapping one in the idempotency ledger
would break the DAG: a replay sends nothing, so the tasks that need a fresh token or fresh results
get none. So these are ``safe`` (``http_read``) and carry no fix. A GraphQL body containing
``mutation`` is not a read.
"""

from __future__ import annotations

import re

__all__ = ["read_only_post"]

#: The last segment of a token endpoint's path (``/oauth2/v2.0/token``, ``/auth/login``).
_TOKEN_END = {
    "token", "access_token", "accesstoken", "login", "signin", "sign-in", "sign_in", "authenticate", "auth",
    "refresh_token",
}  # fmt: skip
#: The last segment of a search or query endpoint (``/api/v1/query``); Elasticsearch's ``_search``
#: family anywhere in the path (``/orders/_search/scroll``).
_SEARCH = {"search", "query", "lookup"}
_SEARCH_ANYWHERE = {"_search", "_msearch", "_count", "_mget", "_sql", "_validate", "_explain"}
#: Hosts that only take pings (cron and heartbeat monitors).
_PING_HOSTS = (
    "hc-ping.com",
    "healthchecks.io",
    "cronitor.link",
    "cronitor.io",
    "nosnch.in",
    "deadmanssnitch.com",
)
_PING_END = {"health", "healthz", "healthcheck", "heartbeat", "ping", "alive", "livez", "readyz"}
_GRANT = re.compile(r"grant_type", re.IGNORECASE)
_MUTATION = re.compile(r"\bmutation\b", re.IGNORECASE)


def read_only_post(url: str, body: str = "") -> str | None:
    """Why a POST to ``url`` with ``body`` (its text, as far as known) only reads; None if it may write."""
    path = url.split("://", 1)[-1] if "://" in url else url
    path = path[path.find("/") :] if "/" in path and "://" in url else path
    segments = [p.lower() for p in path.split("?", 1)[0].split("/") if p]
    last = segments[-1] if segments else ""
    if _GRANT.search(body) or last in _TOKEN_END:
        return "a token request: it only reads (a replay must fetch a fresh token, not skip the call)"
    if "graphql" in url.lower():
        if body and not _MUTATION.search(body):
            return "a GraphQL query without a mutation: it only reads"
        return None
    if last in _SEARCH or any(s in _SEARCH_ANYWHERE for s in segments):
        return "a search or query request: it only reads"
    host = url.split("://", 1)[-1].split("/", 1)[0].lower() if "://" in url else ""
    if last in _PING_END or "ping" in segments or "heartbeat" in segments or host.endswith(_PING_HOSTS):
        return "a health or heartbeat ping: sending it twice changes nothing"
    return None
