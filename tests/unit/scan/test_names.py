"""Name reading in a callable never loops: rebinding a name from itself reads its earlier value."""

from __future__ import annotations

import ast
import time
from typing import Any

from airflow_crashsafe.scan.model import combine
from airflow_crashsafe.scan.names import Bindings
from airflow_crashsafe.scan.python_code import analyze_callable

RUN = ["2031-07-14"]


def _frames_then_post(df: Any) -> None:
    import requests

    df = df.rename(columns={"a": "b"})
    df = df.rename(columns=str.lower)
    df = df.dropna()
    requests.post("https://crm.example.com/leads", json=df.to_dict(), timeout=10)


def _sql_grown_from_itself(cur: Any) -> None:
    sql = "INSERT INTO mart.visits SELECT * FROM raw.visits"
    sql = sql + " WHERE day = '2031-07-14'"
    sql += " AND source = 'web'"
    cur.execute(sql)


def _names_bound_to_each_other() -> None:
    import requests

    a = "x"
    b = a
    a = b
    b = a
    requests.get(a + b, timeout=5)


def _doubled_many_times(cur: Any) -> None:
    s = "SELECT 1"
    s = s + s
    s = s + s
    s = s + s
    s = s + s
    s = s + s
    s = s + s
    s = s + s
    s = s + s
    s = s + s
    s = s + s
    s = s + s
    s = s + s
    cur.execute(s)


def test_rebinding_a_frame_from_itself_does_not_loop() -> None:
    """``df = df.rename(...)`` (the 12 %-unknown loop): the walk ends and the POST after it is found."""
    found = combine(analyze_callable(_frames_then_post, markers=RUN))
    assert (found.verdict, found.category) == ("risky", "http_mutating")


def test_sql_built_from_its_own_earlier_value_is_read() -> None:
    """``sql = sql + ...`` and ``sql += ...`` read the earlier text: the INSERT is an append, not unknown."""
    found = combine(analyze_callable(_sql_grown_from_itself, markers=RUN))
    assert (found.verdict, found.category) == ("risky", "append")
    assert "source = 'web'" in found.reasons[0].evidence


def test_names_bound_to_each_other_end() -> None:
    """``a = b; b = a`` in turn: reading either ends, and the GET is still a read."""
    found = combine(analyze_callable(_names_bound_to_each_other, markers=RUN))
    assert found.verdict == "safe"


def test_text_doubling_itself_is_bounded() -> None:
    """A name built from itself thousands of times over is read within a budget, quickly."""
    started = time.monotonic()
    found = combine(analyze_callable(_doubled_many_times, markers=RUN))
    assert time.monotonic() - started < 5
    assert found.verdict in {"safe", "unknown"}


def test_reading_a_name_inside_its_own_value_gives_the_earlier_value() -> None:
    """The binding being read is invisible to itself: the name stands for the value before it."""
    names = Bindings()
    first, second = ast.Constant("a"), ast.Name("x")
    names.bind("x", first)
    names.bind("x", second)
    with names.read("x") as outer:
        assert outer is second
        with names.read("x") as inner:
            assert inner is first
            with names.read("x") as none:
                assert none is None
    with names.read("x") as again:
        assert again is second


def test_budget_ends_reading() -> None:
    """Once the budget is spent, every name reads as unknown."""
    names = Bindings(budget=1)
    names.bind("x", ast.Constant("a"))
    with names.read("x") as value:
        assert value is not None
    with names.read("x") as value:
        assert value is None
