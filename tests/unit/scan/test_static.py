"""Static analysis: the tasks of files that do not import, read from the syntax tree by the same rules."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from airflow_crashsafe.scan.files import repository_roots
from airflow_crashsafe.scan.model import TaskVerdict
from airflow_crashsafe.scan.static import judge_file
from airflow_crashsafe.scan.static_module import Roots

HEADER = """
import os
from airflow import DAG
from airflow.operators.dummy import DummyOperator
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "dags").mkdir()
    (tmp_path / "plugins").mkdir()
    (tmp_path / "setup.py").write_text("")  # the checkout's top: its packages are the repository's own
    return tmp_path


def judge(repo: Path, source: str, name: str = "dag_file.py") -> dict[str, TaskVerdict]:
    path = repo / "dags" / name
    path.write_text(textwrap.dedent(source))
    roots = Roots([str(repo / "dags"), str(repo / "plugins")], repository_roots([str(repo / "dags")]))
    verdicts = judge_file(str(path), roots, "ModuleNotFoundError: airflow.operators.dummy")
    assert all(v.analysis == "static" for v in verdicts)
    return {f"{v.dag_id}.{v.task_id}": v for v in verdicts}


def test_operators_by_imported_name_alias_and_module_alias(repo: Path) -> None:
    """``from x import Y as Z`` and ``import x as m; m.Y`` both resolve to the operator."""
    out = judge(
        repo,
        HEADER
        + """
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator as Sql
import airflow.providers.common.sql.operators.sql as sqlops
with DAG("d", schedule=None):
    Sql(task_id="a", conn_id="postgres_x", sql="INSERT INTO t SELECT * FROM s")
    sqlops.SQLExecuteQueryOperator(task_id="b", conn_id="postgres_x", sql="SELECT 1")
""",
    )
    assert (out["d.a"].verdict, out["d.a"].category) == ("risky", "append")
    assert out["d.a"].line == 9
    assert out["d.b"].verdict == "safe"


def test_keyword_values_from_fstrings_constants_repo_modules_and_default_args(repo: Path) -> None:
    """Literals, f-strings of module constants, a constant from the repo's own module, default_args."""
    (repo / "dags" / "settings.py").write_text('SCHEMA = "mart"\n')
    out = judge(
        repo,
        HEADER
        + """
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from settings import SCHEMA
TABLE = "orders"
ARGS = {"conn_id": "snowflake_dw", "autocommit": True}
with DAG("d", schedule=None, default_args=ARGS):
    SQLExecuteQueryOperator(task_id="swap", sql=[f"DELETE FROM {SCHEMA}.{TABLE} WHERE day = '{{{{ ds }}}}'",
        f"INSERT INTO {SCHEMA}.{TABLE} SELECT * FROM staging.{TABLE} WHERE day = '{{{{ ds }}}}'"])
""",
    )
    swap = out["d.swap"]
    assert (swap.verdict, swap.category) == ("risky", "overwrite_not_atomic")  # autocommit from default_args
    assert "mart.orders" in swap.fix
    assert "snowflake_dw" in swap.fix


def test_sql_file_from_template_searchpath(repo: Path) -> None:
    """``sql="load.sql"`` is read from the DAG's template_searchpath, computed with os.path."""
    (repo / "dags" / "sql").mkdir()
    (repo / "dags" / "sql" / "load.sql").write_text("INSERT INTO t SELECT * FROM s WHERE day = '{{ ds }}'")
    out = judge(
        repo,
        HEADER
        + """
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
SQL_DIR = os.path.join(os.path.dirname(__file__), "sql")
with DAG("d", schedule=None, template_searchpath=[SQL_DIR]):
    SQLExecuteQueryOperator(task_id="load", conn_id="pg", sql="load.sql")
""",
    )
    assert (out["d.load"].verdict, out["d.load"].category) == ("risky", "append")
    assert "2031-07-14" in out["d.load"].reasons[0].evidence


def test_taskflow_and_python_callables_are_read_from_their_source(repo: Path) -> None:
    """@task and @task.bash functions, PythonOperator(python_callable=f), helpers in the repo's modules."""
    (repo / "plugins" / "vendor.py").write_text(
        "import requests\ndef push(rows):\n    requests.post('https://vendor.example/rows', json=rows)\n"
    )
    out = judge(
        repo,
        HEADER
        + """
import requests
from airflow.decorators import task
from airflow.operators.python_operator import PythonOperator
from vendor import push

def send(**context):
    push([1, 2])

def tidy():
    return sorted([3, 1])

with DAG("d", schedule=None):
    @task
    def fetch():
        return requests.get("https://vendor.example/rows").json()

    @task.bash
    def shell():
        return "echo hi"

    fetch()
    fetch()
    shell()
    PythonOperator(task_id="send", python_callable=send)
    PythonOperator(task_id="tidy", python_callable=tidy)
    PythonOperator(task_id="anon", python_callable=lambda: requests.delete("https://vendor.example/x"))
""",
    )
    assert set(out) == {"d.fetch", "d.fetch__1", "d.shell", "d.send", "d.tidy", "d.anon"}
    assert out["d.fetch"].verdict == "safe"
    assert out["d.shell"].verdict == "unknown"
    assert (out["d.send"].verdict, out["d.send"].category) == ("risky", "http_mutating")
    assert out["d.send"].reasons[0].file.endswith("vendor.py")  # followed into the repo's module
    assert out["d.tidy"].verdict == "safe"
    assert out["d.anon"].verdict == "risky"


def test_loops_comprehensions_and_unknown_iterables(repo: Path) -> None:
    """A loop over a literal renders each id; a comprehension too; an unknown iterable gives a pattern."""
    out = judge(
        repo,
        HEADER
        + """
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.models import Variable
REGIONS = ["eu", "us"]
LOAD = "INSERT INTO t_{} SELECT 1"
with DAG("d", schedule=None):
    for region in REGIONS:
        SQLExecuteQueryOperator(task_id=f"load_{region}", conn_id="pg", sql=LOAD.format(region))
    reads = [SQLExecuteQueryOperator(task_id=f"read_{n}", conn_id="pg", sql="SELECT 1") for n in range(2)]
    for table in Variable.get("tables", deserialize_json=True):
        SQLExecuteQueryOperator(task_id=f"purge_{table}", conn_id="pg", sql=f"DELETE FROM {table}")
""",
    )
    assert {"d.load_eu", "d.load_us", "d.read_0", "d.read_1", "d.purge_{table}"} == set(out)
    assert out["d.load_us"].verdict == "risky"
    assert "t_us" in out["d.load_us"].reasons[0].evidence
    assert out["d.read_1"].verdict == "safe"
    purge = out["d.purge_{table}"]
    assert (purge.verdict, purge.category) == ("unknown", "unreadable_task")  # never its default, never safe


def test_task_groups_prefix_ids(repo: Path) -> None:
    """``with TaskGroup("g")`` and ``@task_group`` functions prefix the ids of the tasks inside."""
    out = judge(
        repo,
        HEADER
        + """
from airflow.decorators import task_group
from airflow.utils.task_group import TaskGroup
with DAG("d", schedule=None):
    with TaskGroup("outer"):
        with TaskGroup(group_id="inner"):
            DummyOperator(task_id="a")
        with TaskGroup("flat", prefix_group_id=False):
            DummyOperator(task_id="b")

    @task_group(group_id="tg")
    def section():
        DummyOperator(task_id="c")

    section()
""",
    )
    assert set(out) == {"d.outer.inner.a", "d.outer.b", "d.tg.c"}


def test_airflow2_paths_are_read_as_their_airflow3_homes(repo: Path) -> None:
    """DummyOperator reads as EmptyOperator, PostgresOperator as SQL (conn_id), SimpleHttpOperator as HTTP."""
    out = judge(
        repo,
        HEADER
        + """
from airflow.operators.postgres_operator import PostgresOperator
from airflow.operators.http_operator import SimpleHttpOperator
from airflow.utils.dates import days_ago
dag = DAG("d", schedule_interval="@daily", start_date=days_ago(1))
start = DummyOperator(task_id="start", dag=dag)
load = PostgresOperator(task_id="load", postgres_conn_id="warehouse", sql="INSERT INTO t SELECT 1", dag=dag)
call = SimpleHttpOperator(task_id="call", http_conn_id="api", endpoint="/pay", dag=dag)
start >> load >> call
""",
    )
    assert (out["d.start"].verdict, out["d.start"].category) == ("safe", "no_op")
    assert out["d.start"].operator == "airflow.operators.dummy.DummyOperator"
    assert "EmptyOperator" in out["d.start"].reasons[1].why
    assert out["d.load"].verdict == "risky"
    assert "conn_id='warehouse'" in out["d.load"].fix
    assert (out["d.call"].verdict, out["d.call"].category) == ("risky", "http_mutating")


def test_operators_of_providers_not_installed(repo: Path) -> None:
    """Known by name: a pod is opaque, a sensor reads; unknown names are unknown, never safe."""
    out = judge(
        repo,
        HEADER
        + """
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.acme.sensors.drop import AcmeDropSensor
from airflow.providers.acme.operators.sync import AcmeSyncOperator
from company_lib.ops import make_op
with DAG("d", schedule=None):
    KubernetesPodOperator(task_id="pod", image="etl:1")
    AcmeDropSensor(task_id="wait")
    AcmeSyncOperator(task_id="sync")
    built = make_op("x")
    built >> DummyOperator(task_id="after")
""",
    )
    assert (out["d.pod"].verdict, out["d.pod"].category) == ("unknown", "opaque_container")
    assert (out["d.wait"].verdict, out["d.wait"].category) == ("safe", "sensor")
    assert (out["d.sync"].verdict, out["d.sync"].category) == ("unknown", "unknown_operator")
    assert "not installed" in out["d.sync"].reasons[0].why
    assert out["d.{built}"].verdict == "unknown"  # named from the >> chain, at its call's line
    assert out["d.{built}"].line == 14


def test_arguments_the_tree_does_not_give_make_the_task_unknown(repo: Path) -> None:
    """SQL from a call, a method from a Variable, a ``**`` splat not known: unknown, never a default."""
    out = judge(
        repo,
        HEADER
        + """
from airflow.models import Variable
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.providers.http.operators.http import HttpOperator
from company_lib.sql import build_sql
COMMON = Variable.get("common", deserialize_json=True)
with DAG("d", schedule=None):
    SQLExecuteQueryOperator(task_id="built", conn_id="pg", sql=build_sql())
    HttpOperator(task_id="call", http_conn_id="api", endpoint="/x", method=Variable.get("method"))
    HttpOperator(task_id="splat", http_conn_id="api", endpoint="/x", **COMMON)
""",
    )
    for key in ("d.built", "d.call", "d.splat"):
        assert (out[key].verdict, out[key].category) == ("unknown", "unreadable_task"), key
    assert "**COMMON" in out["d.splat"].reasons[0].why
    assert "build_sql()" in out["d.built"].reasons[0].why


def test_mapped_tasks_dag_decorators_and_replay_safe(repo: Path) -> None:
    """``.partial().expand()`` over literal SQL, a @dag function, replay_safe(..., reason=...)."""
    out = judge(
        repo,
        """
from airflow.sdk import dag, task
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow_crashsafe import replay_safe

@dag(schedule=None)
def nightly():
    SQLExecuteQueryOperator.partial(task_id="each", conn_id="pg").expand(
        sql=["SELECT 1", "INSERT INTO t SELECT 1"])
    replay_safe(SQLExecuteQueryOperator(task_id="cache", conn_id="pg", sql="INSERT INTO c SELECT 1"),
                reason="cache.hot is read with DISTINCT")

nightly()
""",
    )
    assert set(out) == {"nightly.each", "nightly.cache"}
    assert out["nightly.each"].verdict == "risky"
    assert (out["nightly.cache"].verdict, out["nightly.cache"].category) == (
        "protected",
        "declared_replay_safe",
    )


def test_dag_factories_and_custom_operators_of_the_repository(repo: Path) -> None:
    """A repo module's DAG factory called in a loop is followed; a custom operator's execute is read."""
    (repo / "plugins" / "team_ops.py").write_text(
        "import requests\nfrom airflow.models.baseoperator import BaseOperator\n"
        "class NotifyOperator(BaseOperator):\n"
        "    def execute(self, context):\n"
        "        requests.post('https://chat.example/hook', json={'text': 'done'})\n"
    )
    (repo / "plugins" / "factories.py").write_text(
        "from airflow import DAG\nfrom team_ops import NotifyOperator\n"
        "def build(name):\n"
        "    with DAG(f'sync_{name}', schedule=None) as d:\n"
        "        NotifyOperator(task_id=f'notify_{name}')\n"
        "    return d\n"
    )
    out = judge(
        repo,
        HEADER
        + """
from factories import build
for name in ["a", "b"]:
    globals()[name] = build(name)
""",
    )
    assert set(out) == {"sync_a.notify_a", "sync_b.notify_b"}
    assert out["sync_b.notify_b"].verdict == "risky"
    assert out["sync_b.notify_b"].operator == "team_ops.NotifyOperator"


def test_factories_in_the_repositorys_package_with_kwargs_and_default_args_functions(repo: Path) -> None:
    """A package beside dags/ (installed by the deployment) is read: DAG(**kwargs) and task factories."""
    package = repo / "pipeline"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "dag_utils.py").write_text(
        textwrap.dedent(
            """
            import airflow
            from airflow.providers.http.operators.http import HttpOperator

            def get_default_args():
                return {"retries": 3, "http_conn_id": "vendor"}

            def create_dag(default_args=None, **kwargs):
                if default_args is None:
                    default_args = get_default_args()
                return airflow.DAG(default_args=default_args, **kwargs)

            def create_call(dag, task_id, endpoint, **kwargs):
                return HttpOperator(task_id=task_id, dag=dag, endpoint=endpoint, **kwargs)
            """
        )
    )
    out = judge(
        repo,
        """
from pipeline.dag_utils import create_dag, create_call
DAG_ID = "vendor_sync"
THE_DAG = create_dag(dag_id=DAG_ID, schedule=None)
create_call(THE_DAG, "push", "/push")
create_call(THE_DAG, "read", "/rows", method="GET")
""",
    )
    assert set(out) == {"vendor_sync.push", "vendor_sync.read"}
    assert (out["vendor_sync.push"].verdict, out["vendor_sync.push"].category) == ("risky", "http_mutating")
    assert "http_conn_id='vendor'" in out["vendor_sync.push"].fix  # from the default_args function
    assert out["vendor_sync.read"].verdict == "safe"


def test_repository_roots_never_hide_installed_packages(tmp_path: Path) -> None:
    """The checkout around dags/ is searched for its own packages, never for a name installed here."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "dags").mkdir()
    (tmp_path / "airflow").mkdir()  # a deployment folder named like the installed package
    (tmp_path / "pipeline").mkdir()
    roots = Roots([str(tmp_path / "dags")], repository_roots([str(tmp_path / "dags")]))
    assert repository_roots([str(tmp_path / "dags")]) == [str(tmp_path)]
    assert roots.is_repo("pipeline")
    assert not roots.is_repo("airflow")


def test_names_in_statement_order_local_imports_and_library_factories(repo: Path) -> None:
    """A constant rebound between tasks, a function's own import, a library factory given dag=."""
    out = judge(
        repo,
        """
from airflow import DAG
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator

def make(task_id, table):
    return SQLExecuteQueryOperator(task_id=task_id, conn_id="pg", sql=f"INSERT INTO {table} SELECT 1")

def remote(name):
    from vendor_airflow import pod_task
    return pod_task(dag=dag, name=name, image="etl:1")

with DAG("d", schedule=None) as dag:
    SOURCE = "orders"
    make(f"load_{SOURCE}", SOURCE)
    SOURCE = "users"
    make(f"load_{SOURCE}", SOURCE)
    remote("sync_users")
""",
    )
    assert set(out) == {"d.load_orders", "d.load_users", "d.sync_users"}
    assert "users" in out["d.load_users"].reasons[0].evidence
    assert out["d.load_users"].line == 16  # the factory's call in the DAG file
    sync = out["d.sync_users"]
    assert (sync.verdict, sync.category) == ("unknown", "unknown_operator")
    assert "vendor_airflow.pod_task" in sync.reasons[0].why


def test_an_operator_alias_chosen_at_run_time_is_judged_as_the_worse(repo: Path) -> None:
    """``Op = Quiet if ENV == "dev" else Loud`` with ENV unknown: judged as both, the worse verdict wins."""
    (repo / "plugins" / "messages.py").write_text(
        "import os, requests\nfrom airflow.models.baseoperator import BaseOperator\n"
        "class LogMessage(BaseOperator):\n    def execute(self, context):\n        return None\n"
        "class ChatMessage(BaseOperator):\n    def execute(self, context):\n"
        "        requests.post('https://chat.example/hook', json={})\n"
        "ENV = os.environ.get('ENV', 'prod')\n"
        "MessageOperator = LogMessage if ENV == 'dev' else ChatMessage\n"
    )
    out = judge(
        repo,
        HEADER
        + """
from messages import MessageOperator
with DAG("d", schedule=None, default_args={"owner": "x"} | {"retries": 1}):
    MessageOperator(task_id="hello")
""",
    )
    hello = out["d.hello"]
    assert (hello.verdict, hello.category) == ("risky", "http_mutating")
    assert hello.operator == "messages.ChatMessage"
    assert any("LogMessage or messages.ChatMessage" in r.why for r in hello.reasons)


def test_nested_task_groups_of_a_dag_function(repo: Path) -> None:
    """@task and @task_group functions defined in a @dag function see each other, as closures do."""
    out = judge(
        repo,
        """
from airflow.sdk import dag, task, task_group

@dag(schedule=None)
def harvest():
    @task()
    def fetch(n):
        return n

    @task_group()
    def all_sources(n):
        fetch(n)
        fetch(n)

    first = fetch(0)
    all_sources(first)

harvest()
""",
    )
    assert set(out) == {"harvest.fetch", "harvest.all_sources.fetch", "harvest.all_sources.fetch__1"}


def test_pythonpath_folders_hold_the_repositorys_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package on PYTHONPATH (the deployment's own code) is read from its tree, never imported."""
    lib = tmp_path / "lib"
    (lib / "team_lib").mkdir(parents=True)
    (tmp_path / "dags").mkdir()
    monkeypatch.setenv("PYTHONPATH", str(lib))
    roots = Roots([str(tmp_path / "dags")], repository_roots([str(tmp_path / "dags")]))
    assert roots.is_repo("team_lib")


def test_static_analysis_runs_nothing_of_the_file(repo: Path) -> None:
    """Top-level code, decorators and default values of a statically read file never run."""
    marker = repo / "ran"
    out = judge(
        repo,
        HEADER
        + f"""
open({str(marker)!r}, "w").write("module")
def deco(fn):
    open({str(marker)!r}, "w").write("decorator")
    return fn
@deco
def work(x=open({str(marker)!r}, "w")):
    return 1
from airflow.operators.python import PythonOperator
with DAG("d", schedule=None):
    PythonOperator(task_id="work", python_callable=work)
""",
    )
    assert out["d.work"].verdict == "safe"
    assert not marker.exists()


def test_a_file_that_does_not_parse_names_no_task(repo: Path) -> None:
    """A syntax error gives no static task (the worker falls back to the file's literal task ids)."""
    assert judge(repo, "from airflow import DAG\nwith DAG('d':\n") == {}
