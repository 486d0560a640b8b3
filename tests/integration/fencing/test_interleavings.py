"""Property: any interleaving of begin/write/exit of several attempts leaves no stale output.

The expected outcome is computed by a small model of the rules (newest issued wins, committed
means done, a clear reopens the slot), written in terms of attempts rather than SQL, and compared
with what the database holds: each attempt's fate, the output rows and the fence row.

The model includes recovery admission: an attempt issued a token at try 2 or later is a recovery
re-run (the store has no record of its earlier tries) and holds a place of the example's budget
from begin to exit. Every attempt is stepped on this one thread, so a re-run that finds every place
held cannot be let in by anyone while it waits: it waits ``[crashsafe] recovery_wait_seconds``
(none here) and goes ahead over the budget, as the model expects. With the default wait, an
hour, such a plan would wait on itself.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from airflow_crashsafe.admission import worker
from airflow_crashsafe.admission.lease import Lease
from airflow_crashsafe.errors import CrashsafeError
from airflow_crashsafe.identity import slot_from_context
from airflow_crashsafe.store import admission
from airflow_crashsafe.store.dbapi import Db, connect_url
from airflow_crashsafe.store.store import EVENT_KINDS, Store
from tests.support.fencing import (
    OUTPUT_TABLE,
    AttemptSpec,
    attempt_ctx,
    create_output_table,
    output_rows,
    read_fence_url,
)
from tests.support.postgres import drop_database, make_database
from tests.support.stepping import SteppedAttempt

pytestmark = pytest.mark.integration

STAGES = ("begin", "write", "exit")
#: ``[crashsafe] recovery_wait_seconds`` here: a re-run over the budget goes ahead at once (see the
#: module doc; polling for a place is the admission tests' subject).
RECOVERY_WAIT_SECONDS = "0"


@dataclass
class Plan:
    """Attempts (try, clear generation, clean or failing exit), the order their stages run in, and
    the recovery budget of the slot's resource."""

    attempts: list[tuple[int, int, bool]]
    order: list[int]
    budget: int = 4  # [crashsafe] recovery_concurrency's default


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    count = draw(st.integers(min_value=3, max_value=5))
    tries = draw(st.lists(st.integers(min_value=1, max_value=4), min_size=count, max_size=count))
    cut = draw(st.integers(min_value=1, max_value=4))  # tries above it ran after a clear
    fails = draw(st.lists(st.sampled_from([False, False, True]), min_size=count, max_size=count))
    attempts = [(t, 0 if t <= cut else 1, f) for t, f in zip(tries, fails, strict=True)]
    order = draw(st.permutations([i for i in range(count) for _ in STAGES]))
    budget = draw(st.integers(min_value=1, max_value=4))
    return Plan(attempts, list(order), budget)


@dataclass
class Model:
    """The rules, over attempts: who holds the newest token, which attempt committed, who holds a
    recovery place."""

    budget: int
    newest: tuple[int, int] | None = None  # (token, try) of the newest attempt issued a token
    tokens: int = 0
    commits: list[tuple[int, int, int]] = field(default_factory=list)  # (attempt, clear, token)
    rejected: int = 0
    outcome: dict[int, str] = field(default_factory=dict)
    token: dict[int, int] = field(default_factory=dict)
    places: set[int] = field(default_factory=set)  # attempts holding a recovery place
    asked: list[tuple[int, bool]] = field(default_factory=list)  # (try, admitted) per re-run that asked

    def begin(self, i: int, try_number: int, clear: int) -> None:
        outranks = self.newest is None or try_number >= self.newest[1]  # later starter wins a tie
        done = any(c_clear >= clear for _, c_clear, _ in self.commits)
        if outranks and not done:
            self.tokens += 1
            self.newest = (self.tokens, try_number)
            self.token[i] = self.tokens
            if try_number > 1:  # a recovery re-run: it asks for a place, or goes ahead without
                admitted = len(self.places) < self.budget
                self.asked.append((try_number, admitted))
                if admitted:
                    self.places.add(i)
        elif outranks and self.commits:
            self.outcome[i] = f"already_committed:{self.commits[-1][0]}"
        else:
            self.outcome[i] = "fenced_start"
            self.rejected += 1

    def exit(self, i: int, clear: int, fail: bool) -> None:
        self.places.discard(i)  # the place is given back however the block ends
        if i in self.outcome:
            return
        if fail:
            self.outcome[i] = "failed"
        elif self.newest is not None and self.token[i] == self.newest[0]:
            self.outcome[i] = "committed"
            self.commits.append((i, clear, self.token[i]))
        else:
            self.outcome[i] = "fenced_commit"
            self.rejected += 1


@pytest.fixture(scope="module", params=["postgresql", "sqlite"])
def new_target(request: pytest.FixtureRequest) -> Iterator[Callable[[], str]]:
    """Factory of a target per example: one shared PostgreSQL database, or a new SQLite file."""
    workdir = tempfile.mkdtemp(prefix="crashsafe-interleave-")
    if request.param == "postgresql":
        admin: str = request.getfixturevalue("postgres_server_url")
        url = make_database(admin)
        db = connect_url(url)
        create_output_table(db)
        db.close()
        yield lambda: url
        drop_database(admin, url)
    else:

        def fresh_sqlite() -> str:
            path = f"sqlite:///{workdir}/{uuid.uuid4().hex}.db"
            db = connect_url(path)
            create_output_table(db)
            db.close()
            return path

        yield fresh_sqlite
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def shared_store() -> Iterator[Store]:
    """One store for all examples; each example has its own dag_id, hence its own events."""
    workdir = tempfile.mkdtemp(prefix="crashsafe-interleave-store-")
    url = f"sqlite:///{workdir}/store.db"
    store = Store(lambda: connect_url(url), location=url)
    yield store
    store.close()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple[int, bool]]]:
    """Per resource, (try, admitted) of each re-run that asked for a recovery place, in order; the
    wait for a place is short (see the module doc)."""
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__RECOVERY_WAIT_SECONDS", RECOVERY_WAIT_SECONDS)
    seen: dict[str, list[tuple[int, bool]]] = {}
    wait = worker.wait_for_place

    def recording(asking: worker.Asking, max_wait: float) -> Lease | None:
        lease = wait(asking, max_wait)
        request = asking.request
        seen.setdefault(request.resource, []).append((request.try_number, lease is not None))
        return lease

    monkeypatch.setattr(worker, "wait_for_place", recording)
    return seen


def _held(store: Store, resource: str) -> int:
    with store.transaction(immediate=False) as db:
        return admission.live_holders(db, resource)


def _run(plan: Plan, url: str, store: Store, dag_id: str) -> tuple[list[SteppedAttempt], list[int]]:
    """Step the plan; the attempts, and how many recovery places were held after each step."""
    is_sqlite = url.startswith("sqlite")
    conns: list[Db] = [connect_url(url) for _ in plan.attempts]
    stepped = [
        SteppedAttempt(
            conns[i],
            store,
            AttemptSpec(f"a{i}", t, c, dag_id=dag_id, partition=dag_id, overwrite=False),
            recovery_resource=dag_id,  # each example has a budget of its own
            recovery_concurrency=plan.budget,
        )
        for i, (t, c, _) in enumerate(plan.attempts)
    ]
    held: list[int] = []
    seen: Counter[int] = Counter()
    try:
        for i in plan.order:
            stage = STAGES[seen[i]]
            seen[i] += 1
            attempt, fail = stepped[i], plan.attempts[i][2]
            if stage == "begin":
                attempt.begin()
                if is_sqlite and attempt.outcome is None:
                    # SQLite has one writer: a body holds the write lock from its start, so the
                    # whole attempt runs before any other attempt's next statement can.
                    attempt.write()
                    attempt.exit(fail=fail)
            elif stage == "write" and attempt.outcome == "already_committed":
                assert attempt.tx is not None
                with pytest.raises(CrashsafeError, match="already committed"):
                    _ = attempt.tx.cursor
            elif stage == "write" and attempt.outcome is None:
                attempt.write()
            elif stage == "exit":
                attempt.exit(fail=fail)
            held.append(_held(store, dag_id))
    finally:
        for conn in conns:
            conn.close()
    return stepped, held


@given(plan=plans())
# More re-runs than places, all begun before any ends: the last one can only go ahead over budget.
@example(plan=Plan([(2, 0, False)] * 5, [0, 1, 2, 3, 4] * 3, budget=4))
@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_interleavings_never_leave_stale_output(
    new_target: Callable[[], str],
    shared_store: Store,
    asked: dict[str, list[tuple[int, bool]]],
    plan: Plan,
) -> None:
    """Every interleaving ends as the model of newest-issued-wins and committed-means-done says,
    recovery places included, and never waits on itself."""
    url, dag_id = new_target(), f"prop_{uuid.uuid4().hex[:10]}"
    stepped, held = _run(plan, url, shared_store, dag_id)

    model = Model(plan.budget)
    expected_held = []
    seen: Counter[int] = Counter()
    for i in plan.order:
        stage = STAGES[seen[i]]
        seen[i] += 1
        try_number, clear, fail = plan.attempts[i]
        if stage == "begin":
            model.begin(i, try_number, clear)
            if url.startswith("sqlite") and i not in model.outcome:
                model.exit(i, clear, fail)
        elif stage == "exit":
            model.exit(i, clear, fail)
        expected_held.append(len(model.places))
    assert asked.get(dag_id, []) == model.asked
    assert held == expected_held

    observed = {}
    for i, attempt in enumerate(stepped):
        outcome = attempt.outcome or "?"
        if outcome == "already_committed":
            assert attempt.tx is not None
            assert attempt.tx.committed_by is not None
            outcome += f":{attempt.tx.committed_by.ti_id[1:]}"
        observed[i] = outcome
    assert observed == model.outcome

    # Output: exactly the committed attempts' rows, at most one per clear generation.
    db = connect_url(url)
    try:
        rows = sorted(output_rows(db, dag_id))  # each example writes its own partition
    finally:
        db.close()
    expected_rows = sorted((f"a{i}", plan.attempts[i][0], token) for i, _, token in model.commits)
    assert rows == expected_rows
    generations = [plan.attempts[i][1] for i, _, _ in model.commits]
    assert len(generations) == len(set(generations))
    # A later commit never belongs to an older try or token.
    commit_keys = [(plan.attempts[i][0], token) for i, _, token in model.commits]
    assert commit_keys == sorted(commit_keys)

    slot = slot_from_context(attempt_ctx(stepped[0].spec), dag_id)
    fence = read_fence_url(url, slot, OUTPUT_TABLE)
    assert fence is not None
    assert model.newest is not None
    assert (fence.issued_token, fence.issued_try) == model.newest
    assert fence.rejected_count == model.rejected
    if model.commits:
        last, clear, token = model.commits[-1]
        assert fence.committed is not None
        assert (fence.committed.ti_id, fence.committed.clear_number, fence.committed.token) == (
            f"a{last}",
            clear,
            token,
        )
    else:
        assert fence.committed is None

    kinds = Counter(e["kind"] for e in shared_store.events(dag_id=dag_id, kinds=EVENT_KINDS))
    expected_kinds = Counter(
        {
            "committed": len(model.commits),
            "fenced_out": model.rejected,
            "skipped_committed": sum(o.startswith("already") for o in model.outcome.values()),
        }
    )
    assert kinds == +expected_kinds
