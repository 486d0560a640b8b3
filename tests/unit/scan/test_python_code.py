"""Python callables judged from their source: HTTP, mail, queues, objects, SQL, protection, unreadable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_crashsafe.scan.model import combine
from airflow_crashsafe.scan.python_code import analyze_callable

RUN = ["2031-07-14"]


def _post(ds: str) -> None:
    import requests

    requests.post("https://x", json={"day": ds})


def _post_keyed(ds: str, run_id: str) -> None:
    import requests

    requests.post("https://x", headers={"Idempotency-Key": f"pay-{run_id}"})


def _post_attempt_key(ti: Any) -> None:
    import requests

    requests.post("https://x", headers={"Idempotency-Key": str(ti.id)})


def _calls_helper(ds: str) -> None:
    _post(ds)


def _mail() -> None:
    import smtplib

    with smtplib.SMTP("mail") as smtp:
        smtp.sendmail("a@x", ["b@x"], "hi")


def _random_object() -> None:
    import uuid

    import boto3  # type: ignore[import-not-found]

    boto3.client("s3").put_object(Bucket="b", Key=f"x/{uuid.uuid4()}.json", Body=b"")


def _cursor_overwrite(ds: str, cur: Any) -> None:
    cur.execute("DELETE FROM t WHERE day = %s", (ds,))
    cur.execute("INSERT INTO t SELECT * FROM s WHERE day = %s", (ds,))


def _cursor_append(cur: Any) -> None:
    cur.execute("INSERT INTO t SELECT * FROM s")


def _protected() -> None:
    import requests

    from airflow_crashsafe.effects import effect

    with effect("pay") as fx:
        if fx.pending:
            requests.post("https://x", headers={"Idempotency-Key": fx.key})
            fx.done()


def _pure(rows: list[int]) -> int:
    return sum(r * 2 for r in rows)


def _shell() -> None:
    import subprocess

    subprocess.run(["./load.sh"], check=True)


CASES: list[tuple[Callable[..., Any], str, str]] = [
    (_post, "risky", "http_mutating"),
    (_post_keyed, "safe", "http_keyed"),
    (_post_attempt_key, "risky", "http_mutating"),
    (_calls_helper, "risky", "http_mutating"),
    (_mail, "risky", "notification"),
    (_random_object, "risky", "object_write_random"),
    (_cursor_overwrite, "safe", "partition_overwrite"),
    (_cursor_append, "risky", "append"),
    (_protected, "protected", "crashsafe_helper"),
    (_pure, "safe", "pure"),
    (_shell, "unknown", "opaque_command"),
]


@pytest.mark.parametrize(("fn", "verdict", "category"), CASES, ids=[c[0].__name__ for c in CASES])
def test_callable_verdicts(fn: Callable[..., Any], verdict: str, category: str) -> None:
    """Each kind of call gives the verdict docs/scan.md describes."""
    found = combine(analyze_callable(fn, markers=RUN))
    assert (found.verdict, found.category) == (verdict, category)


def test_reasons_point_at_the_call() -> None:
    """A risky call's reason names this file and the line of the call."""
    found = combine(analyze_callable(_post, markers=RUN))
    reason = found.reasons[0]
    assert reason.file == __file__
    assert reason.line == _post.__code__.co_firstlineno + 3
    assert "requests.post" in reason.evidence


def test_unreadable_callable_is_unknown() -> None:
    """A callable without source (built at run time) is unknown, never safe."""
    namespace: dict[str, Any] = {}
    exec("def generated():\n    return 1\n", namespace)
    found = combine(analyze_callable(namespace["generated"], markers=RUN))
    assert (found.verdict, found.category) == ("unknown", "unreadable_callable")
