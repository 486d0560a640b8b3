"""What the idempotency ledger adds to an HTTP call: requests, HttpHook, the operator without and with it.

Run from the repository root::

    python -m benchmarks.ledger                # ~1 min, throwaway PostgreSQL cluster
    python -m benchmarks.ledger --quick        # ~15 s smoke
    python -m benchmarks.ledger --postgres-url postgresql://postgres@127.0.0.1:5433/postgres

A local vendor (``airflow_crashsafe.testing.KeyHonouringVendor``) answers on 127.0.0.1 in this
process. Variants, each call with a fresh idempotency key (the operator: a fresh slot):

* ``requests`` - ``requests.Session().post(url, json=..., headers={"Idempotency-Key": k})``;
* ``HttpHook`` - what ``IdempotentHttpOperator.execute`` does per call besides the ledger: a new
  ``HttpHook``, ``get_conn()`` once, ``url_from_endpoint``, one ``session.request``;
* ``operator, ledger stubbed out`` - the same ``execute`` with ``begin_call`` / ``record_send`` /
  ``finish_call`` replaced by no-ops: everything the operator does but the ledger;
* ``operator`` - ``IdempotentHttpOperator.execute`` with the crashsafe store on PostgreSQL;
* ``operator replay`` - the same slot again after its success: the retry that sends nothing.

The target (≤ 2 ms at p50) is on the ledger's overhead: ``operator`` minus ``operator, ledger
stubbed out``. Printed beside it, with the same 2 ms yardstick, is the stricter ``operator`` minus
``HttpHook``, which also charges the operator's own work (Airflow's ``execute`` wrapper, redaction,
response handling); and the whole difference from plain ``requests``.

The operator's task contexts are built before timing starts, as Airflow hands ``execute()`` one.

PostgreSQL: ``--postgres-url`` (an admin URL; the benchmark creates and drops its own database),
else ``$CRASHSAFE_BENCH_POSTGRES_URL``, else a throwaway cluster (``fsync=off``,
``synchronous_commit=off``: a commit does not wait for a WAL flush there). Every figure is
against baselines measured in the same run, variants interleaved in a rotating order.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.fencing import postgres_admin

TARGET_ADDED_MS = 2.0
DAG_ID = "bench_ledger"
CONN_ID = "bench_ledger_vendor"
ENDPOINT = "payments"
PAYLOAD: dict[str, Any] = {"amount": 1250, "currency": "EUR", "customer": "cus_bench"}
BASELINE = "requests"
HOOK = "HttpHook (no operator, no ledger)"
STUBBED = "operator, ledger stubbed out"
OPERATOR = "operator (ledger on PostgreSQL)"
REPLAY = "operator replay (sends nothing)"


def _quiet_airflow() -> None:
    """A log line per execute() (and Airflow's "outside the task runner" warning) is not measured."""
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "ERROR")
    for name in ("airflow_crashsafe", "airflow.task", "airflow", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _contexts(task_id: str, first: int, count: int) -> list[dict[str, Any]]:
    """Task contexts built before timing starts: Airflow hands execute() one, the hook needs none."""
    from airflow_crashsafe.testing import fake_context

    return [fake_context(dag_id=DAG_ID, task_id=task_id, map_index=first + n) for n in range(count)]


def _variants(vendor_url: str, calls: int) -> dict[str, Callable[[int], Any]]:
    import requests

    from airflow_crashsafe.operators.http import IdempotentHttpOperator
    from airflow_crashsafe.testing import fake_context

    url = f"{vendor_url}/{ENDPOINT}"
    operator = IdempotentHttpOperator(
        task_id="pay", http_conn_id=CONN_ID, endpoint=ENDPOINT, json=PAYLOAD, timeout=10.0
    )
    replayed = IdempotentHttpOperator(
        task_id="pay_again", http_conn_id=CONN_ID, endpoint=ENDPOINT, json=PAYLOAD, timeout=10.0
    )

    def plain(n: int) -> Any:
        response = requests.Session().post(
            url, json=PAYLOAD, headers={"Idempotency-Key": uuid.uuid4().hex}, timeout=10.0
        )
        response.raise_for_status()
        return response.json()

    hook_call = _variants_hook_only()

    def hook(n: int) -> Any:
        return hook_call()

    contexts = _contexts("pay", 0, calls)
    replays = [fake_context(dag_id=DAG_ID, task_id="pay_again") for _ in range(calls)]

    def through_operator(n: int) -> Any:
        return operator.execute(contexts[n])  # type: ignore[arg-type]

    stub_contexts = _contexts("pay_stubbed", 0, calls)

    def stubbed(n: int) -> Any:
        with _ledger_stubbed():
            return operator.execute(stub_contexts[n])  # type: ignore[arg-type]

    def replay(n: int) -> Any:
        return replayed.execute(replays[n])  # type: ignore[arg-type]

    replay(-1)  # the recorded success every later replay finds
    return {BASELINE: plain, HOOK: hook, STUBBED: stubbed, OPERATOR: through_operator, REPLAY: replay}


def _variants_hook_only() -> Callable[[], Any]:
    """The HttpHook path: what ``execute`` does per call besides the ledger."""
    from airflow.providers.http.hooks.http import HttpHook

    def hook() -> Any:
        http = HttpHook(method="POST", http_conn_id=CONN_ID)
        session = http.get_conn(headers={})
        response = session.request(
            "POST",
            http.url_from_endpoint(ENDPOINT),
            json=PAYLOAD,
            data=None,
            headers={"Idempotency-Key": uuid.uuid4().hex},
            timeout=10.0,
        )
        response.raise_for_status()
        return response.json()

    return hook


def measure(variants: dict[str, Callable[[int], Any]], reps: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per call of each variant; variants interleaved in a rotating order each repetition."""
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(warmup + reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            start = time.perf_counter()
            variants[name](rep)
            if rep >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _print_table(times: dict[str, list[float]], out: dict[str, Any]) -> None:
    base, hook, stubbed = times[BASELINE], times[HOOK], times[STUBBED]
    base50, hook50, stubbed50 = (statistics.median(values) for values in (base, hook, stubbed))
    print(f"\n## Per call, {len(base)} calls per variant (ms)")
    print(
        f"{'variant':<34}{'p50':>9}{'p95':>9}{'x requests':>12}{'+ms vs requests':>17}"
        f"{'+ms vs hook':>13}{'+ms vs stubbed':>16}{'paired vs stubbed':>19}"
    )
    for name, values in times.items():
        p50, p95 = statistics.median(values), _pct(values, 0.95)
        paired_hook = statistics.median(v - h for v, h in zip(values, hook, strict=True))
        paired_stubbed = statistics.median(v - h for v, h in zip(values, stubbed, strict=True))
        print(
            f"{name:<34}{p50 * 1e3:>9.3f}{p95 * 1e3:>9.3f}{p50 / base50:>12.2f}{(p50 - base50) * 1e3:>17.3f}"
            f"{(p50 - hook50) * 1e3:>13.3f}{(p50 - stubbed50) * 1e3:>16.3f}{paired_stubbed * 1e3:>19.3f}"
        )
        out["variants"][name] = {
            "p50_ms": p50 * 1e3,
            "p95_ms": p95 * 1e3,
            "paired_vs_hook_ms": paired_hook * 1e3,
            "paired_vs_stubbed_ms": paired_stubbed * 1e3,
        }


@contextmanager
def _timed(module: Any, name: str, into: dict[str, float], label: str) -> Iterator[None]:
    """Replace ``module.name`` with a wrapper adding its wall time to ``into[label]``."""
    original = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            into[label] = into.get(label, 0.0) + time.perf_counter() - start

    setattr(module, name, wrapper)
    try:
        yield
    finally:
        setattr(module, name, original)


@contextmanager
def _counted(counts: dict[str, float]) -> Iterator[None]:
    """Count the statements and commits crashsafe's store sends (each one a round trip).

    Statements go through ``Db.execute`` / ``Db.fetch_alone`` or, for the ledger's per-call ones on
    psycopg 3, libpq prepared statements (``store/prepared.py``: one round trip per ``_run``).
    """
    from airflow_crashsafe.store import prepared
    from airflow_crashsafe.store.dbapi import Db

    def counting(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] = counts.get(name, 0) + 1
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                counts["db_seconds"] = counts.get("db_seconds", 0) + time.perf_counter() - began

        return wrapper

    saved = Db.execute, Db.fetch_alone, Db.commit, prepared.send_and_wait
    Db.execute = counting("statements", Db.execute)  # type: ignore[method-assign]
    Db.fetch_alone = counting("statements", Db.fetch_alone)  # type: ignore[method-assign]
    Db.commit = counting("commits", Db.commit)  # type: ignore[method-assign]
    prepared.send_and_wait = counting("statements", prepared.send_and_wait)
    try:
        yield
    finally:
        Db.execute, Db.fetch_alone, Db.commit, prepared.send_and_wait = saved  # type: ignore[method-assign]


@contextmanager
def _ledger_stubbed() -> Iterator[None]:
    """The operator with begin_call/record_send/finish_call as no-ops: everything but the ledger."""
    from airflow_crashsafe.effects.calls import Call
    from airflow_crashsafe.identity import attempt_from_context, slot_from_context
    from airflow_crashsafe.operators import http

    def begin_call(*, target: str, context: Any, **kwargs: Any) -> Call:
        slot, attempt = slot_from_context(context), attempt_from_context(context)
        return Call(uuid.uuid4().hex, slot, target, attempt, None, None, "send", None)  # type: ignore[arg-type]

    saved = http.begin_call, http.record_send, http.finish_call
    stubs: tuple[Any, Any, Any] = (begin_call, lambda call: None, lambda call, **kw: None)
    http.begin_call, http.record_send, http.finish_call = stubs
    try:
        yield
    finally:
        http.begin_call, http.record_send, http.finish_call = saved


def _stages(reps: int, start: int, out: dict[str, Any]) -> None:
    """The ledger's steps inside the real execute(), interleaved with the HttpHook path.

    Medians of parts do not add up to the median of a whole when the parts have long tails (a
    store round trip on a busy machine does), so each step is reported with its mean too, and the
    means are checked against the operator's mean minus the hook's: that account closes.
    """
    import requests
    from airflow.providers.http.hooks.http import HttpHook

    from airflow_crashsafe.operators import http
    from airflow_crashsafe.operators.http import IdempotentHttpOperator
    from airflow_crashsafe.store import ledger, open_store

    operator = IdempotentHttpOperator(
        task_id="pay_staged", http_conn_id=CONN_ID, endpoint=ENDPOINT, json=PAYLOAD, timeout=10.0
    )
    hook_call = _variants_hook_only()
    contexts = _contexts("pay_staged", start, reps)
    counts: dict[str, float] = {}
    claim, begin, send, finish, outcome = (
        "  token + intent: one WITH .. INSERT .. INSERT (claim_new)",
        "begin_call (token + intent, and its Python)",
        "record_send (counted by the claim for the first send)",
        "finish_call (outcome + fence commit, one statement)",
        "  outcome + fence commit statement",
    )
    request, conn = "  session.request (both paths)", "  HttpHook.get_conn (both paths)"
    ledger_sum, rest, total = (
        "=> ledger steps (begin_call + record_send + finish_call)",
        "rest of execute (hook, request, response, XCom)",
        "execute total",
    )
    op_samples: list[dict[str, float]] = []
    hook_samples: list[dict[str, float]] = []
    stage: dict[str, float] = {}
    with (
        _timed(http, "begin_call", stage, begin),
        _timed(ledger, "claim_new", stage, claim),
        _timed(http, "record_send", stage, send),
        _timed(http, "finish_call", stage, finish),
        _timed(ledger, "record_outcome_and_commit", stage, outcome),
        _timed(requests.Session, "request", stage, request),
        _timed(HttpHook, "get_conn", stage, conn),
    ):
        for n in range(start, start + reps):
            for first in ("operator", "hook") if n % 2 else ("hook", "operator"):
                stage.clear()
                began = time.perf_counter()
                if first == "operator":
                    with _counted(counts):
                        operator.execute(contexts[n - start])  # type: ignore[arg-type]
                else:
                    hook_call()
                stage[total] = time.perf_counter() - began
                if first == "operator":
                    stage[ledger_sum] = stage[begin] + stage.get(send, 0.0) + stage[finish]
                    stage[rest] = stage[total] - stage[ledger_sum]
                    op_samples.append(dict(stage))
                else:
                    stage[rest] = stage[total]
                    hook_samples.append(dict(stage))
    db = open_store().connection()
    rtt, empty_commit = [], []
    for _ in range(reps):
        began = time.perf_counter()
        db.execute_alone("SELECT 1").fetchone()
        rtt.append(time.perf_counter() - began)
        db.begin()
        db.execute("SELECT 1").fetchone()
        began = time.perf_counter()
        db.commit()
        empty_commit.append(time.perf_counter() - began)
    print(
        f"\n## Where the operator's time goes: execute() interleaved with the HttpHook path, {reps} calls "
        "each (ms; store on PostgreSQL)"
    )
    print(f"  {'(one SELECT 1 round trip, store connection)':<58}{statistics.median(rtt) * 1e3:>8.3f}")
    print(f"  {'(one COMMIT of a read-only tx)':<58}{statistics.median(empty_commit) * 1e3:>8.3f}")
    out["round_trip_ms"] = statistics.median(rtt) * 1e3
    print(f"  {'step':<58}{'p50':>8}{'mean':>9}{'hook p50':>10}{'hook mean':>11}")
    for key in (begin, claim, send, finish, outcome, ledger_sum, conn, request, rest, total):
        p50 = statistics.median(s.get(key, 0.0) for s in op_samples) * 1e3
        mean = statistics.fmean(s.get(key, 0.0) for s in op_samples) * 1e3
        out["stages"][key] = p50
        out["stages_mean"] = out.get("stages_mean", {}) | {key: mean}
        line = f"  {key:<58}{p50:>8.3f}{mean:>9.3f}"
        if key in (conn, request, rest, total):
            hook_p50 = statistics.median(s.get(key, 0.0) for s in hook_samples) * 1e3
            hook_mean = statistics.fmean(s.get(key, 0.0) for s in hook_samples) * 1e3
            line += f"{hook_p50:>10.3f}{hook_mean:>11.3f}"
        print(line)
    op_mean = statistics.fmean(s[total] for s in op_samples)
    added_mean = op_mean - statistics.fmean(s[total] for s in hook_samples)
    ledger_mean = statistics.fmean(s[ledger_sum] for s in op_samples)
    out["staged_added_mean_ms"], out["staged_ledger_mean_ms"] = added_mean * 1e3, ledger_mean * 1e3
    print(
        f"  operator minus hook, mean: {added_mean * 1e3:.3f} ms, of which the ledger steps "
        f"{ledger_mean * 1e3:.3f} ms and everything else {(added_mean - ledger_mean) * 1e3:.3f} ms"
    )
    per_call = {k: v / reps for k, v in counts.items()}
    out["store_statements_per_call"] = per_call.get("statements", 0.0)
    out["store_commits_per_call"] = per_call.get("commits", 0.0)
    out["store_db_ms_per_call"] = per_call.get("db_seconds", 0.0) * 1e3
    print(
        f"  store statements per call: {per_call.get('statements', 0):.0f} + "
        f"{per_call.get('commits', 0):.0f} COMMITs (each a round trip), "
        f"{out['store_db_ms_per_call']:.3f} ms in the driver (mean); the rest of the ledger steps is Python"
    )


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ledger", description=__doc__.split("\n")[0])
    parser.add_argument("--postgres-url", help="admin URL of a PostgreSQL server to benchmark on")
    parser.add_argument("--quick", action="store_true", help="a ~15 s smoke run")
    parser.add_argument("--reps", type=int, help="calls per variant (default 1500, --quick 60)")
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args(argv)
    reps = args.reps or (60 if args.quick else 1500)
    warmup = 10 if args.quick else 50
    stage_reps = max(20, reps // 5)
    from airflow_crashsafe.testing.postgres import drop_database, make_database

    out: dict[str, Any] = {"quick": args.quick, "reps": reps, "variants": {}, "stages": {}}
    with tempfile.TemporaryDirectory(prefix="crashsafe-bench-ledger-") as home:
        os.environ.setdefault("AIRFLOW_HOME", home)  # never the user's ~/airflow
        _quiet_airflow()
        from airflow_crashsafe.store import reset_store_cache
        from airflow_crashsafe.testing import KeyHonouringVendor

        with postgres_admin(args.postgres_url) as (admin, origin), KeyHonouringVendor() as vendor:
            store_db = make_database(admin, prefix="bench_ledger_store")
            os.environ["AIRFLOW_CONN_CRASHSAFE_DEFAULT"] = store_db
            os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = vendor.url
            reset_store_cache()
            try:
                print(
                    f"# ledger benchmark on PostgreSQL ({origin}); store: database "
                    f"{store_db.rsplit('/', 1)[1]}; vendor {vendor.url}"
                )
                variants = _variants(vendor.url, warmup + reps)
                _quiet_airflow()  # importing Airflow resets its loggers' levels
                times = measure(variants, reps, warmup)
                _print_table(times, out)
                _stages(stage_reps, warmup + reps + stage_reps + 5, out)
                out["bookings"] = vendor.bookings
            finally:
                reset_store_cache()
                drop_database(admin, store_db)
    v = out["variants"]
    added = v[OPERATOR]["p50_ms"] - v[STUBBED]["p50_ms"]
    added_hook = v[OPERATOR]["p50_ms"] - v[HOOK]["p50_ms"]
    added_plain = v[OPERATOR]["p50_ms"] - v[BASELINE]["p50_ms"]
    hook_cost = v[HOOK]["p50_ms"] - v[BASELINE]["p50_ms"]
    out.update(
        added_ms=added,
        added_vs_hook_ms=added_hook,
        added_vs_requests_ms=added_plain,
        hook_vs_requests_ms=hook_cost,
    )

    def verdict(ms: float) -> str:
        return "MET" if ms <= TARGET_ADDED_MS else "MISSED"

    print("\n## Target (the ledger's overhead: operator minus the operator with its ledger stubbed out, p50)")
    print(f"ledger added per call at p50: {added:.3f} ms (target ≤ {TARGET_ADDED_MS:g} ms) {verdict(added)}")
    print(f"  paired median: {v[OPERATOR]['paired_vs_stubbed_ms']:.3f} ms")
    print(
        f"  stricter, operator minus the HttpHook path (also charges the operator's own work): "
        f"{added_hook:.3f} ms {verdict(added_hook)}; paired median {v[OPERATOR]['paired_vs_hook_ms']:.3f} ms"
    )
    print(
        f"  vs plain requests: +{added_plain:.3f} ms "
        f"(of which HttpHook/Airflow connection lookup +{hook_cost:.3f} ms)"
    )
    print(f"  a replay (retry after success, nothing sent): {v[REPLAY]['p50_ms']:.3f} ms at p50")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
    return out


def main(argv: list[str] | None = None) -> int:
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
