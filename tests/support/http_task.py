"""Run one attempt of an IdempotentHttpOperator in this process, optionally SIGKILLing itself.

Used by crash tests: ``python -m tests.support.http_task TRY_NUMBER CRASH_POINT [ON_UNKNOWN]``,
with the vendor connection and crashsafe store given through the environment. CRASH_POINT is
``none``, ``before_intent`` (dies before the ledger records anything) or ``after_outcome`` (dies
right after the outcome is recorded). Dying mid-request is the vendor's job (it kills this pid).
Exit code 0 on success, 3 on a CrashsafeError (its class name printed on stdout).
"""

from __future__ import annotations

import os
import signal
import sys


def main() -> int:
    try_number, crash_point = int(sys.argv[1]), sys.argv[2]
    on_unknown = sys.argv[3] if len(sys.argv) > 3 else "resend"

    from airflow_crashsafe.effects import calls
    from airflow_crashsafe.errors import CrashsafeError
    from airflow_crashsafe.operators import http
    from airflow_crashsafe.testing import fake_context

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if crash_point == "before_intent":
        calls.ledger_sql.claim = lambda *a, **k: die()  # type: ignore[assignment]
        calls.ledger_sql.claim_new = lambda *a, **k: die()  # type: ignore[assignment]
    elif crash_point == "after_outcome":
        original = calls.finish_call

        def finish_then_die(*args, **kwargs):  # type: ignore[no-untyped-def]
            original(*args, **kwargs)
            die()

        http.finish_call = finish_then_die  # type: ignore[assignment]

    operator = http.IdempotentHttpOperator(
        task_id="push_payment",
        http_conn_id="vendor",
        endpoint="/payments",
        json={"vendor": "acme", "amount_cents": 12_500},
        on_unknown_outcome=on_unknown,  # type: ignore[arg-type]
        max_sends=2,
        timeout=10,
    )
    try:
        result = operator.execute(
            fake_context(dag_id="payouts", task_id="push_payment", try_number=try_number)
        )
    except CrashsafeError as exc:
        print(type(exc).__name__)
        return 3
    print(result["body"]["payment_id"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
