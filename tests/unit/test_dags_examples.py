"""Every example DAG parses the way Airflow 3.3's dag-processor parses it, without its warehouse."""

from __future__ import annotations

from pathlib import Path

import pytest

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags_examples"
DAG_FILES = sorted(p for p in DAGS_DIR.glob("*.py") if not p.name.startswith("_"))


def test_dags_examples_is_not_empty() -> None:
    """The examples folder holds the drill's two DAGs at least."""
    names = {p.name for p in DAG_FILES}
    assert {"nightly_revenue_plain.py", "nightly_revenue_crashsafe.py"} <= names


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.name)
def test_example_parses_without_import_errors(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file imports with no connection or database defined and yields at least one DAG."""
    from airflow.dag_processing.dagbag import DagBag

    for var in ("AIRFLOW_CONN_CRASHSAFE_WAREHOUSE", "AIRFLOW_CONN_CRASHSAFE_DEFAULT"):
        monkeypatch.delenv(var, raising=False)
    bag = DagBag(dag_folder=str(path), safe_mode=False)
    assert bag.import_errors == {}
    assert bag.dags, f"{path.name} defines no DAG"
    for dag in bag.dags.values():
        assert dag.fileloc == str(path)
        assert dag.doc_md, f"{dag.dag_id} should explain itself (dags_examples double as docs)"


def test_drill_dags_share_their_shape() -> None:
    """The control and the crashsafe DAG load the same night: same regions, one long load pair each."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS_DIR), safe_mode=False)
    plain = bag.dags["nightly_revenue_plain"]
    safe = bag.dags["nightly_revenue_crashsafe"]
    assert len(plain.task_ids) == len(safe.task_ids)
    for dag in (plain, safe):
        assert dag.max_active_tasks >= len(dag.task_ids)
        assert dag.schedule is None or str(dag.timetable.summary) in ("None", "")


def test_drill_dags_parse_with_the_mariadb_warehouse(monkeypatch: pytest.MonkeyPatch) -> None:
    """CRASHSAFE_DRILL_WAREHOUSE=mariadb (``drill --warehouse mariadb``): same tasks, MariaDB's SQL."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("CRASHSAFE_DRILL_WAREHOUSE", "mariadb")
    for name in ("nightly_revenue_plain", "nightly_revenue_crashsafe"):
        bag = DagBag(dag_folder=str(DAGS_DIR / f"{name}.py"), safe_mode=False)
        assert bag.import_errors == {}
        setup = bag.dags[name].get_task("setup")
        assert any("DO SLEEP(" in statement for statement in setup.sql)
        assert not any("pg_sleep" in statement for statement in setup.sql)
