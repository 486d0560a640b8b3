"""`airflow-crashsafe ledger show|prune|resolve` against an embedded store seeded by real calls."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_crashsafe.effects import Effect, effect
from airflow_crashsafe.errors import OutcomeUnknown
from airflow_crashsafe.store import Store, ledger, open_store, reset_store_cache
from airflow_crashsafe.testing import fake_context
from tests.support.cli import printed_json, run_cli

DAG = "billing"
OTHER_DAG = "emails"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """The embedded SQLite store the CLI opens (no store connection), fresh for each test."""
    monkeypatch.delenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", raising=False)
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__EMBEDDED_PATH", str(tmp_path / "crashsafe.db"))
    reset_store_cache()
    yield open_store()
    reset_store_cache()


def _succeed(task_id: str, *, dag_id: str = DAG, try_number: int = 1) -> str:
    """Run an effect that succeeds; returns its key."""
    with effect("send", context=fake_context(dag_id=dag_id, task_id=task_id, try_number=try_number)) as fx:
        if fx.pending:
            fx.done({"message_id": f"msg-{task_id}"})
    return fx.key


def _leave_unknown(task_id: str) -> str:
    """Run an effect whose block raises after it may have acted: its outcome is unknown."""
    with (
        pytest.raises(TimeoutError),
        effect("charge", context=fake_context(dag_id=DAG, task_id=task_id), payload={"cents": 500}) as fx,
    ):
        raise TimeoutError("vendor did not answer")
    return fx.key


def _retry(task_id: str, ran: list[str]) -> Effect:
    """Try 2 of the unknown-outcome call; appends to ``ran`` when its block acts."""
    context = fake_context(dag_id=DAG, task_id=task_id, try_number=2)
    with effect("charge", context=context, payload={"cents": 500}) as fx:
        if fx.pending:
            ran.append(task_id)
            fx.done({"charge_id": "ch_2"})
    return fx


def _state(store: Store, key: str) -> str:
    with store.transaction() as db:
        entry = ledger.get_entry(db, key)
    assert entry is not None
    return entry.state


def _one_line_error(err: str, text: str) -> None:
    assert err.startswith("airflow-crashsafe: error: "), err
    assert err.count("\n") == 1, err
    assert text in err


def test_show_key_prints_every_field(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger show KEY` prints the entry one field per line: key, slot, target, state, result."""
    key = _succeed("notify")
    code, out, _ = run_cli(capsys, "ledger", "show", key)
    assert code == 0
    fields = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in out.splitlines() if "  " in line}
    assert fields["idem_key"] == key
    assert fields["dag_id"] == DAG
    assert fields["task_id"] == "notify"
    assert fields["target"] == "send"
    assert fields["state"] == "succeeded"
    assert fields["send_count"] == "1"
    assert "msg-notify" in fields["result"]


def test_show_dag_lists_only_that_dags_entries(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger show --dag DAG` prints a table with a row per entry of that DAG and none of others."""
    done, unknown = _succeed("notify"), _leave_unknown("charge_card")
    other = _succeed("welcome", dag_id=OTHER_DAG)
    code, out, _ = run_cli(capsys, "ledger", "show", "--dag", DAG)
    assert code == 0
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["key", "task"])
    rows = {line.split()[0]: line.split() for line in lines[header + 1 :]}
    assert set(rows) == {done, unknown}
    assert other not in out
    assert rows[done][1:6] == ["notify", "2026-11-29T00:00:00+00:00", "send", "succeeded", "1"]
    assert rows[unknown][4] == "unknown"


def test_show_dagprinted_json(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger show --dag DAG --json` prints a JSON list of full entries, request and result included."""
    done, unknown = _succeed("notify"), _leave_unknown("charge_card")
    code, out, _ = run_cli(capsys, "ledger", "show", "--dag", DAG, "--json")
    assert code == 0
    entries = {e["idem_key"]: e for e in printed_json(out)}
    assert set(entries) == {done, unknown}
    assert entries[done]["result"] == {"message_id": "msg-notify"}
    assert entries[unknown]["request"] == {"payload": {"cents": 500}}
    assert entries[unknown]["error"] == "TimeoutError: vendor did not answer"


def test_show_keyprinted_json(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger show KEY --json` prints a one-entry JSON list."""
    key = _succeed("notify")
    code, out, _ = run_cli(capsys, "ledger", "show", key, "--json")
    assert code == 0
    (entry,) = printed_json(out)
    assert entry["idem_key"] == key
    assert entry["state"] == "succeeded"


def test_show_needs_key_or_dag(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger show` with neither KEY nor --dag exits 2 with a one-line message."""
    code, _, err = run_cli(capsys, "ledger", "show")
    assert code == 2
    _one_line_error(err, "ledger show needs a KEY or --dag DAG_ID.")


@pytest.mark.parametrize("limit", ["-5", "0", "many"])
def test_show_limit_must_be_a_positive_count(
    store: Store, capsys: pytest.CaptureFixture[str], limit: str
) -> None:
    """`ledger show --limit` below 1 (or not a number) exits 2 saying what to give."""
    code, _, err = run_cli(capsys, "ledger", "show", "--dag", DAG, "--limit", limit)
    assert code == 2
    last = err.splitlines()[-1]  # argparse's usage, then the one line of the error
    assert last.endswith(f"argument --limit: expected a whole number of entries, 1 or more, not {limit!r}")


def test_show_unknown_key_is_an_error(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger show` of a key nobody recorded exits 2 naming the key."""
    _succeed("notify")
    code, _, err = run_cli(capsys, "ledger", "show", "no-such-key")
    assert code == 2
    _one_line_error(err, "No ledger entry has key no-such-key.")


def test_resolve_unknown_key_is_an_error(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger resolve` of a key nobody recorded exits 2 naming the key."""
    code, _, err = run_cli(capsys, "ledger", "resolve", "no-such-key", "--failed")
    assert code == 2
    _one_line_error(err, "No ledger entry has key no-such-key.")


def test_resolve_refuses_a_known_outcome(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger resolve` of a succeeded key exits 2 and leaves the entry as it was."""
    key = _succeed("notify")
    code, _, err = run_cli(capsys, "ledger", "resolve", key, "--failed")
    assert code == 2
    _one_line_error(err, f"Key {key} is 'succeeded', not unknown")
    assert _state(store, key) == "succeeded"


@pytest.mark.parametrize("flags", [[], ["--succeeded", "--failed"]])
def test_resolve_needs_exactly_one_outcome(
    store: Store, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    """`ledger resolve KEY` needs exactly one of --succeeded/--failed (usage error, exit 2)."""
    key = _leave_unknown("charge_card")
    code, _, err = run_cli(capsys, "ledger", "resolve", key, *flags)
    assert code == 2
    assert "--succeeded" in err
    assert _state(store, key) == "unknown"


def test_unknown_outcome_blocks_a_retry_until_resolved(store: Store) -> None:
    """Before resolve, a retry of a call with an unknown outcome is refused without acting."""
    _leave_unknown("charge_card")
    ran: list[str] = []
    with pytest.raises(OutcomeUnknown, match="ledger resolve"):
        _retry("charge_card", ran)
    assert ran == []


def test_resolve_succeeded_makes_a_retry_replay(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """After `resolve --succeeded` a retry replays the hand-recorded result and does not act."""
    key = _leave_unknown("charge_card")
    code, out, _ = run_cli(capsys, "ledger", "resolve", key, "--succeeded")
    assert code == 0
    assert out.splitlines()[-1] == f"{key}: succeeded (a retry now replays)"
    assert _state(store, key) == "succeeded"
    ran: list[str] = []
    fx = _retry("charge_card", ran)
    assert ran == []
    assert fx.replayed
    assert fx.result == {"resolved_by_hand": "succeeded"}


def test_resolve_failed_makes_a_retry_act_again(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """After `resolve --failed` a retry runs the block again under the same key."""
    key = _leave_unknown("charge_card")
    code, out, _ = run_cli(capsys, "ledger", "resolve", key, "--failed")
    assert code == 0
    assert out.splitlines()[-1] == f"{key}: failed (a retry now sends again)"
    assert _state(store, key) == "failed"
    ran: list[str] = []
    fx = _retry("charge_card", ran)
    assert ran == ["charge_card"]
    assert fx.key == key
    assert _state(store, key) == "succeeded"


def _age(store: Store, key: str, days: float) -> None:
    """Move an entry's intent ``days`` into the past, in the store's own timestamp format."""
    stamp = datetime.now(timezone.utc) - timedelta(days=days)
    with store.transaction() as db:
        db.execute(
            "UPDATE crashsafe_ledger SET intent_at = %(at)s WHERE idem_key = %(key)s",
            {"at": stamp.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z", "key": key},
        )


def _age_fence(store: Store, task_id: str, days: float) -> None:
    """Move the last token issued for ``task_id``'s call ``days`` into the past (SQLite's format)."""
    stamp = datetime.now(timezone.utc) - timedelta(days=days)
    with store.transaction() as db:
        db.execute(
            "UPDATE crashsafe_fences SET issued_at = %(at)s WHERE task_id = %(task_id)s",
            {"at": stamp.strftime("%Y-%m-%d %H:%M:%S"), "task_id": task_id},
        )


def _fenced_tasks(store: Store) -> set[str]:
    with store.transaction() as db:
        rows = db.execute("SELECT task_id FROM crashsafe_fences WHERE target LIKE 'ledger:%%'").fetchall()
    return {str(row[0]) for row in rows}


def _keys(store: Store) -> set[str]:
    with store.transaction() as db:
        return {e.idem_key for e in ledger.list_entries(db)}


@pytest.mark.parametrize(
    ("argv", "days", "removed"),
    [
        pytest.param([], 30, "old", id="default-retention"),
        pytest.param(["--older-than-days", "5"], 5, "both", id="older-than-days"),
    ],
)
def test_prune_removes_only_old_entries(
    store: Store,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    days: int,
    removed: str,
) -> None:
    """`ledger prune` deletes entries older than the retention (default 30 days) and keeps the rest.

    The fence rows of the pruned calls go with them; an old fence row whose entry remains stays.
    """
    fresh, week_old, old = _succeed("fresh"), _succeed("week_old"), _leave_unknown("old")
    _age(store, week_old, 7)
    _age(store, old, 45)
    for task_id, age in (("week_old", 7), ("old", 45), ("fresh", 45)):
        _age_fence(store, task_id, age)
    code, out, _ = run_cli(capsys, "ledger", "prune", *argv)
    assert code == 0
    gone = {old} if removed == "old" else {old, week_old}
    assert out.splitlines()[-1] == (
        f"pruned {len(gone)} ledger entries older than {days} days "
        f"and {len(gone)} fence rows of calls no longer in the ledger"
    )
    assert _keys(store) == {fresh, week_old, old} - gone
    assert _fenced_tasks(store) == {"fresh", "week_old", "old"} - (
        {"old"} if removed == "old" else {"old", "week_old"}
    )


def test_prune_with_nothing_old_removes_nothing(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ledger prune` honours [crashsafe] ledger_retention_days and leaves recent entries alone."""
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__LEDGER_RETENTION_DAYS", "2")
    key = _succeed("fresh")
    code, out, _ = run_cli(capsys, "ledger", "prune")
    assert code == 0
    assert out.splitlines()[-1] == (
        "pruned 0 ledger entries older than 2 days and 0 fence rows of calls no longer in the ledger"
    )
    assert _keys(store) == {key}


@pytest.mark.parametrize("days", ["-5", "0", "nan", "1e309", "100000000000"])
def test_prune_refuses_a_retention_out_of_range_and_deletes_nothing(
    store: Store, capsys: pytest.CaptureFixture[str], days: str
) -> None:
    """`--older-than-days -5` would put the cutoff in the future and delete every entry (so every
    retry re-sends); a huge one overflowed: both exit 2 naming the flag and its range, deleting nothing."""
    key = _succeed("fresh")
    code, _, err = run_cli(capsys, "ledger", "prune", "--older-than-days", days)
    assert code == 2
    assert "argument --older-than-days: " in err
    assert "set it to a whole number of days from 1 to 36500" in err
    assert _keys(store) == {key}


def test_ledger_without_subcommand_is_a_usage_error(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger` alone exits 2 and names the missing LEDGER_COMMAND."""
    code, _, err = run_cli(capsys, "ledger")
    assert code == 2
    assert "LEDGER_COMMAND" in err


def test_show_redacts_an_entry_stored_in_clear(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger show` masks what an older version stored in clear: query string, secret fields, error."""
    from airflow_crashsafe.identity import attempt_from_context, slot_from_context

    secret = "s3cret-in-clear"
    context = fake_context(dag_id=DAG, task_id="legacy")
    db = store.connection()
    ledger.claim_new(
        db,
        key="legacy-key",
        slot=slot_from_context(context),
        target="legacy",
        fence_target="ledger:legacy",
        version=1,
        fingerprint="f",
        request={"endpoint": f"/pay?api_key={secret}&page=2", "json": {"client_secret": secret, "n": 1}},
        attempt=attempt_from_context(context),
    )
    with db.autocommit():
        ledger.record_outcome(
            db,
            "legacy-key",
            state="unknown",
            response_status=None,
            result={"refresh_token": secret},
            error=f"HTTPError: 401, Authorization: Bearer {secret}",
        )
    for argv in (("legacy-key",), ("legacy-key", "--json"), ("--dag", DAG, "--json")):
        code, out, _ = run_cli(capsys, "ledger", "show", *argv)
        assert code == 0
        assert secret not in out
        assert "legacy-key" in out
    shown = printed_json(run_cli(capsys, "ledger", "show", "legacy-key", "--json")[1])[0]
    assert shown["request"] == {"endpoint": "/pay", "json": {"client_secret": "***", "n": 1}}
