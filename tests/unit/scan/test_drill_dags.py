"""The drill's two DAGs scanned: every task the crash harms is risky; the crashsafe DAG is all safe."""

from __future__ import annotations

from airflow_crashsafe.scan import scan_paths
from drill.dags import DAGS, EXAMPLES, LONG_TASK_PREFIXES, PUSH_PREFIX

#: Tasks the drill's report shows harmed in the plain DAG: the long loads (run twice, rows doubled),
#: the total computed from them, and the payment pushes (booked twice).
HARMED_PREFIXES = (*LONG_TASK_PREFIXES, PUSH_PREFIX, "revenue_total")


def test_plain_dag_harmed_tasks_are_risky() -> None:
    """Loads, the total and the HTTP pushes of the plain DAG are risky; its idempotent setup is not."""
    plain_id = DAGS["plain"][0]
    result = scan_paths([str(EXAMPLES / f"{plain_id}.py")])
    verdicts = {t.task_id: t for t in result.tasks if t.dag_id == plain_id}
    harmed = [tid for tid in verdicts if tid.startswith(HARMED_PREFIXES)]
    assert len(harmed) >= 5
    for tid in harmed:
        assert verdicts[tid].verdict == "risky", (tid, verdicts[tid].reasons)
    assert verdicts["setup"].verdict == "safe"
    keyed = next(t for tid, t in verdicts.items() if tid.startswith(f"{PUSH_PREFIX}keyed"))
    assert "per attempt" in keyed.reasons[0].why  # an Idempotency-Key of {{ ti.id }} is no key at all


def test_crashsafe_dag_is_protected_or_safe() -> None:
    """Every task of the crashsafe DAG comes out protected or safe."""
    dag_id = DAGS["crashsafe"][0]
    result = scan_paths([str(EXAMPLES / f"{dag_id}.py")])
    tasks = [t for t in result.tasks if t.dag_id == dag_id]
    assert tasks
    assert {t.verdict for t in tasks} <= {"protected", "safe"}, [
        (t.task_id, t.verdict) for t in tasks if t.verdict not in {"protected", "safe"}
    ]
