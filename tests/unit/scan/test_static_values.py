"""Values read from a syntax tree without running it: what is known, and what stays unknown."""

from __future__ import annotations

import ast
from pathlib import PurePath

import pytest

from airflow_crashsafe.scan.static_values import LocalEnv, Unresolved, evaluate, has_unresolved, id_text

NAMES = {"SCHEMA": "mart", "TABLES": ["a", "b"], "ARGS": {"conn_id": "pg"}, "__file__": "/repo/dags/x.py"}


class _Module:
    """An environment with a few module-level names."""

    def lookup(self, name: str) -> object:
        return NAMES.get(name, Unresolved(name))


def value(text: str, **local: object) -> object:
    return evaluate(ast.parse(text, mode="eval").body, LocalEnv(local, _Module()))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("f'{SCHEMA}.orders'", "mart.orders"),
        ("'INSERT INTO ' + SCHEMA + '.t'", "INSERT INTO mart.t"),
        ("'{}.{}'.format(SCHEMA, 't')", "mart.t"),
        ("'DELETE FROM %s' % SCHEMA", "DELETE FROM mart"),
        ("{**ARGS, 'autocommit': True}", {"conn_id": "pg", "autocommit": True}),
        ("dict(ARGS, retries=2)", {"conn_id": "pg", "retries": 2}),
        ("[t.upper() for t in TABLES]", Unresolved),
        ("list(range(3))", [0, 1, 2]),
        ("TABLES + ['c']", ["a", "b", "c"]),
        ("ARGS['conn_id']", "pg"),
        ("os.path.join(os.path.dirname(__file__), 'sql')", "/repo/dags/sql"),
        ("Path(__file__).parent / 'sql'", PurePath("/repo/dags/sql")),
        ("f'load_{region}'", "load_eu"),
        ("'x' if SCHEMA else 'y'", "x"),
        ("Param(5, type='integer')", 5),
    ],
)
def test_known_values(text: str, expected: object) -> None:
    """Literals, f-strings, constants, dict merges, ``os.path`` and ``Path`` arithmetic evaluate."""
    got = value(text, region="eu")
    if expected is Unresolved:
        assert isinstance(got, Unresolved)
    else:
        assert got == expected


@pytest.mark.parametrize(
    "text",
    [
        "Variable.get('x')",
        "build_sql()",
        "f'{unknown_name}_x'",
        "['SELECT 1', make()]",
        "range(1000000)",
        "{**defaults, 'a': 1}",
    ],
)
def test_unknown_values_stay_unknown(text: str) -> None:
    """Calls, Variables, names bound at run time and huge ranges are never guessed."""
    assert has_unresolved(value(text))


def test_ids_keep_their_unknown_part_as_a_pattern() -> None:
    """An id whose f-string part is unknown keeps it as ``{expr}``; a known one renders."""
    env = LocalEnv({"n": Unresolved("n")}, _Module())
    node = ast.parse("f'load_{n}_{SCHEMA}'", mode="eval").body
    assert id_text(node, env) == "load_{n}_mart"
