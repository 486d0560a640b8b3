"""Copy a DAG repository and rewrite what Airflow 3 removed, mechanically, so its files can import.

Usage: ``python -m benchmarks.port_airflow2 SRC DST`` (DST is replaced). Two passes over every
``.py`` file of the copy: ruff's Airflow migration fixes (``AIR3``: imports moved to
``airflow.sdk`` and the standard provider, ``schedule_interval=`` in ``DAG(...)``), then a libcst
pass for what ruff leaves: the ``*_operator`` / ``dummy`` / ``contrib`` module paths, ``days_ago``,
``provide_context=``, ``schedule_interval=`` elsewhere, ``@apply_defaults``, and
``PostgresOperator``'s ``postgres_conn_id``. Names keep their old spelling through ``as`` aliases
so the rest of a file is untouched. It reports the providers the files import and which of them
are not installed here. No semantics are changed by hand; what it cannot port stays as it is.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import libcst as cst

__all__ = ["MODULES", "port_source", "port_tree", "providers_in"]

# old module -> (new module, {old name: new name}); names not listed keep their name.
MODULES: dict[str, tuple[str, dict[str, str]]] = {
    "airflow.operators.dummy": (
        "airflow.providers.standard.operators.empty",
        {"DummyOperator": "EmptyOperator"},
    ),
    "airflow.operators.dummy_operator": (
        "airflow.providers.standard.operators.empty",
        {"DummyOperator": "EmptyOperator"},
    ),
    "airflow.operators.empty": ("airflow.providers.standard.operators.empty", {}),
    "airflow.operators.python": ("airflow.providers.standard.operators.python", {}),
    "airflow.operators.python_operator": ("airflow.providers.standard.operators.python", {}),
    "airflow.operators.bash": ("airflow.providers.standard.operators.bash", {}),
    "airflow.operators.bash_operator": ("airflow.providers.standard.operators.bash", {}),
    "airflow.operators.trigger_dagrun": ("airflow.providers.standard.operators.trigger_dagrun", {}),
    "airflow.operators.latest_only": ("airflow.providers.standard.operators.latest_only", {}),
    "airflow.operators.branch": ("airflow.providers.standard.operators.branch", {}),
    "airflow.operators.datetime": ("airflow.providers.standard.operators.datetime", {}),
    "airflow.operators.weekday": ("airflow.providers.standard.operators.weekday", {}),
    "airflow.operators.email": ("airflow.providers.smtp.operators.smtp", {}),
    "airflow.operators.email_operator": ("airflow.providers.smtp.operators.smtp", {}),
    "airflow.operators.http_operator": (
        "airflow.providers.http.operators.http",
        {"SimpleHttpOperator": "HttpOperator"},
    ),
    "airflow.providers.http.operators.http": (
        "airflow.providers.http.operators.http",
        {"SimpleHttpOperator": "HttpOperator"},
    ),
    "airflow.operators.postgres_operator": (
        "airflow.providers.common.sql.operators.sql",
        {"PostgresOperator": "SQLExecuteQueryOperator"},
    ),
    "airflow.providers.postgres.operators.postgres": (
        "airflow.providers.common.sql.operators.sql",
        {"PostgresOperator": "SQLExecuteQueryOperator"},
    ),
    "airflow.sensors.external_task": ("airflow.providers.standard.sensors.external_task", {}),
    "airflow.sensors.external_task_sensor": ("airflow.providers.standard.sensors.external_task", {}),
    "airflow.sensors.python": ("airflow.providers.standard.sensors.python", {}),
    "airflow.sensors.bash": ("airflow.providers.standard.sensors.bash", {}),
    "airflow.sensors.filesystem": ("airflow.providers.standard.sensors.filesystem", {}),
    "airflow.sensors.time_delta": ("airflow.providers.standard.sensors.time_delta", {}),
    "airflow.sensors.date_time": ("airflow.providers.standard.sensors.date_time", {}),
    "airflow.sensors.base": ("airflow.sdk", {}),
    "airflow.sensors.base_sensor_operator": ("airflow.sdk", {}),
    "airflow.hooks.base": ("airflow.sdk", {}),
    "airflow.hooks.base_hook": ("airflow.sdk", {}),
    "airflow.hooks.postgres_hook": ("airflow.providers.postgres.hooks.postgres", {}),
    "airflow.hooks.http_hook": ("airflow.providers.http.hooks.http", {}),
    "airflow.contrib.hooks.slack_webhook_hook": ("airflow.providers.slack.hooks.slack_webhook", {}),
    "airflow.contrib.operators.slack_webhook_operator": (
        "airflow.providers.slack.operators.slack_webhook",
        {},
    ),
    "airflow.contrib.operators.bigquery_operator": (
        "airflow.providers.google.cloud.operators.bigquery",
        {"BigQueryOperator": "BigQueryInsertJobOperator"},
    ),
    "airflow.contrib.operators.kubernetes_pod_operator": (
        "airflow.providers.cncf.kubernetes.operators.pod",
        {},
    ),
    "airflow.kubernetes.secret": ("airflow.providers.cncf.kubernetes.secret", {}),
    "airflow.utils.task_group": ("airflow.sdk", {}),
    "airflow.models.variable": ("airflow.sdk", {}),
}
_REMOVED_KEYWORDS = {"provide_context"}
_PROVIDER = re.compile(r"\bairflow\.providers\.([a-z_]+(?:\.[a-z_]+)?)")


def _dotted(node: cst.BaseExpression | None) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _module(dotted: str) -> cst.Attribute | cst.Name:
    parts = dotted.split(".")
    expr: cst.Attribute | cst.Name = cst.Name(parts[0])
    for part in parts[1:]:
        expr = cst.Attribute(expr, cst.Name(part))
    return expr


class _Porter(cst.CSTTransformer):
    def __init__(self) -> None:
        self.needs_pendulum = False
        self.postgres_names: set[str] = set()

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom) -> cst.ImportFrom:
        old = _dotted(updated.module)
        if old == "airflow.utils.dates":
            self.needs_pendulum = True
        if old not in MODULES or isinstance(updated.names, cst.ImportStar):
            return updated
        new, renames = MODULES[old]
        names = []
        for alias in updated.names:
            name = _dotted(alias.name)
            if name in renames:
                local = alias.asname.name if alias.asname else cst.Name(name)
                if name == "PostgresOperator":
                    self.postgres_names.add(_dotted(local))
                alias = alias.with_changes(name=cst.Name(renames[name]), asname=cst.AsName(name=local))
            names.append(alias)
        return updated.with_changes(module=_module(new), names=names)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = _dotted(updated.func)
        if func.endswith("days_ago") and updated.args:
            self.needs_pendulum = True
            days = updated.args[0].value
            today = cst.parse_expression('pendulum.today("UTC")')
            return cst.Call(
                cst.Attribute(today, cst.Name("add")),
                [cst.Arg(cst.UnaryOperation(cst.Minus(), days), keyword=cst.Name("days"))],
            )
        args = []
        for arg in updated.args:
            key = arg.keyword.value if arg.keyword else None
            if key in _REMOVED_KEYWORDS:
                continue
            if key == "schedule_interval":
                arg = arg.with_changes(keyword=cst.Name("schedule"))
            if key == "postgres_conn_id" and func in self.postgres_names:
                arg = arg.with_changes(keyword=cst.Name("conn_id"))
            args.append(arg)
        return updated.with_changes(args=args)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        kept = [d for d in updated.decorators if _dotted(d.decorator) != "apply_defaults"]
        return updated.with_changes(decorators=kept)


def port_source(source: str) -> str:
    """One file's text with the libcst pass applied (ruff's pass runs on the tree)."""
    porter = _Porter()
    module = cst.parse_module(source).visit(porter)
    code = module.code
    code = re.sub(
        r"^from airflow\.utils\.(decorators import apply_defaults|dates import days_ago)\n",
        "",
        code,
        flags=re.M,
    )
    if porter.needs_pendulum and not re.search(r"^import pendulum$", code, flags=re.M):
        code = "import pendulum\n" + code
    return code


def port_tree(src: Path, dst: Path) -> dict[str, object]:
    """Copy ``src`` to ``dst`` (replacing it) and port every Python file; returns what happened."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    ruff = Path(sys.executable).with_name("ruff")
    subprocess.run(
        [
            str(ruff if ruff.exists() else "ruff"),
            "check",
            "--isolated",
            "--no-cache",
            "--preview",
            "--select",
            "AIR3",
            "--fix",
            "--unsafe-fixes",
            "--exit-zero",
            "--quiet",
            str(dst),
        ],
        capture_output=True,
        check=False,
    )
    changed, failed = 0, []
    for path in sorted(dst.rglob("*.py")):
        text = path.read_text(errors="replace")
        try:
            new = port_source(text)
        except cst.ParserSyntaxError:
            failed.append(str(path.relative_to(dst)))
            continue
        if new != text:
            path.write_text(new)
            changed += 1
    providers = providers_in(dst)
    return {
        "files_rewritten": changed,
        "unparsable": failed,
        "providers": sorted(providers),
        "providers_missing": sorted(p for p in providers if not _installed(p)),
    }


def _installed(provider: str) -> bool:
    try:
        return importlib.util.find_spec(f"airflow.providers.{provider}") is not None
    except ModuleNotFoundError:
        return False


def providers_in(root: Path) -> set[str]:
    """Provider packages (``google.cloud`` is ``google``) the Python files under ``root`` import."""
    found = set()
    for path in root.rglob("*.py"):
        for match in _PROVIDER.finditer(path.read_text(errors="replace")):
            name = match.group(1)
            top = name.split(".")[0]
            found.add(name if top in {"cncf", "common", "apache", "microsoft"} else top)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("dst", type=Path)
    args = parser.parse_args(argv)
    print(json.dumps(port_tree(args.src, args.dst), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
