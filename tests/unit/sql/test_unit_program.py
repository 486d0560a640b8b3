"""The server-side unit's DO block: how it is assembled, and how its coded errors are read back."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from airflow_crashsafe.sql.unit_program import UnitProgram, dollar_quote, unit_failure


def _render(program: UnitProgram) -> str:
    return program.render(
        lock_sql="pg_advisory_xact_lock(1, 2)",
        start_check_sql="SELECT 1",
        commit_sql="UPDATE fences SET committed_token = 7",
        finish_sql="UPDATE units SET result = $1::jsonb",
    )


def test_the_block_locks_checks_runs_commits_the_fence_and_records_in_that_order() -> None:
    """Lock first (in-flight marker), stale check before any work, the fence commit after it."""
    program = UnitProgram(token=7, try_number=2)
    program.execute("DELETE FROM t WHERE day = '2024-01-02'", count_as="deleted")
    program.execute("INSERT INTO t SELECT 1", count_as="rows")
    block = _render(program)
    order = [
        block.index("pg_advisory_xact_lock(1, 2)"),
        block.index("SELECT 1"),
        block.index("DELETE FROM t"),
        block.index("INSERT INTO t"),
        block.index("UPDATE fences"),
        block.index("UPDATE units"),
    ]
    assert order == sorted(order)
    assert block.startswith("DO $cs")
    assert "json_build_object('deleted', cs_deleted, 'rows', cs_rows)" in block


def test_user_text_is_dollar_quoted_with_a_tag_it_cannot_contain() -> None:
    """A statement containing $$, quotes or a would-be tag stays one literal for EXECUTE."""
    program = UnitProgram()
    nasty = "SELECT $$x$$, 'it''s', $cs$ not a tag $cs$"
    program.execute(nasty)
    block = _render(program)
    wrapped = [
        tag for tag in re.findall(r"EXECUTE (\$cs[0-9a-f]{12}\$)", block) if f"{tag}{nasty}{tag}" in block
    ]
    assert len(wrapped) == 1
    assert wrapped[0] not in nasty


@pytest.mark.parametrize("ending", ["$csaaaaaaaaaaaa", "$csaaaaaaaaaaaa$"])
def test_text_ending_in_the_tag_or_its_prefix_gets_another_tag(
    monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    """Text ending in ``$cs<tag>`` (the tag minus its final ``$``) would close early: another tag is drawn."""
    drawn = iter(["aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr("airflow_crashsafe.sql.unit_program.secrets.token_hex", lambda n: next(drawn))
    text = f"SELECT 1 -- {ending}"
    quoted = dollar_quote(text)
    assert quoted == f"$csbbbbbbbbbbbb${text}$csbbbbbbbbbbbb$"


def test_a_quoted_body_ends_only_at_its_closing_tag() -> None:
    """Whatever the text, the first occurrence of the tag after the opening one is the closing one."""
    for text in ["", "$", "$cs", "x$$", "a $cs$ b", "ends with $cs0"]:
        quoted = dollar_quote(text)
        tag = quoted[: quoted.index("$", 1) + 1]
        assert quoted.index(tag, len(tag)) == len(quoted) - len(tag)


def test_result_keys_and_constants_choose_what_the_result_reports() -> None:
    program = UnitProgram()
    program.select_into("SELECT count(*) FROM x", "null_rows")
    program.execute("MERGE ...", count_as="rows")
    program.result_keys = ["rows"]
    program.constants["statements"] = 3
    block = _render(program)
    assert "json_build_object('rows', cs_rows, 'statements', 3)" in block
    assert "cs_null_rows bigint := 0;" in block


def test_counter_names_must_be_identifiers() -> None:
    with pytest.raises(ValueError, match="identifier"):
        UnitProgram().execute("SELECT 1", count_as="rows; DROP TABLE x")


def test_coded_errors_are_decoded_with_their_json_detail() -> None:
    exc = Exception("crashsafe: rows outside the partition")
    exc.sqlstate = "CSOUT"  # type: ignore[attr-defined]
    exc.diag = SimpleNamespace(message_detail='{"total": 5, "outside": 2}')  # type: ignore[attr-defined]
    failure = unit_failure(exc)
    assert failure is not None
    assert failure.code == "CSOUT"
    assert failure.detail == {"total": 5, "outside": 2}


def test_other_errors_are_not_unit_failures() -> None:
    exc = Exception("relation does not exist")
    exc.sqlstate = "42P01"  # type: ignore[attr-defined]
    assert unit_failure(exc) is None
    assert unit_failure(ValueError("x")) is None
