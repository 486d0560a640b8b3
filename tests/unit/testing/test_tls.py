"""The HTTPS stand-in answers as a named host through a client's proxy settings, and only as it."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from airflow_crashsafe.testing import Reply, serve
from airflow_crashsafe.testing.tls import https_stand_in


def test_a_client_reaches_the_named_host_through_the_stand_in_and_trusts_only_its_ca(tmp_path: Path) -> None:
    """requests with the stand-in as HTTPS proxy and its CA: the named host answers over verified TLS;
    another host fails verification; without the CA the named host fails too."""
    with https_stand_in(
        ["events.example.org"], tmp_path, lambda r: Reply(202, {"host": r.headers["Host"]})
    ) as s:
        proxies = {"https": s.proxy_url}
        answer = requests.post(
            "https://events.example.org/v2/enqueue",
            json={"k": 1},
            proxies=proxies,
            verify=str(s.ca_file),
            timeout=5,
        )
        with pytest.raises(requests.exceptions.SSLError):
            requests.get("https://other.example.org/", proxies=proxies, verify=str(s.ca_file), timeout=5)
        with pytest.raises(requests.exceptions.SSLError):
            requests.get("https://events.example.org/", proxies=proxies, timeout=5)  # the system's CAs
    assert (answer.status_code, answer.json()) == (202, {"host": "events.example.org"})
    posts = [r for r in s.server.requests if r.method == "POST"]
    assert [(r.path, r.json()) for r in posts] == [("/v2/enqueue", {"k": 1})]
    assert next(r.path for r in s.server.requests if r.method == "CONNECT") == "events.example.org:443"


def test_a_plain_server_refuses_to_be_a_proxy() -> None:
    """Without a TLS context, CONNECT is answered 405: the plain server is no open proxy."""
    with serve() as server, pytest.raises(requests.exceptions.ProxyError):
        requests.get("https://events.example.org/", proxies={"https": server.url}, timeout=5)
    assert [(r.method, r.path) for r in server.requests] == [("CONNECT", "events.example.org:443")]
