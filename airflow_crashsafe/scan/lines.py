"""Where each task is written: an index of ``task_id=`` literals and ``@task`` functions per file.

Airflow does not record the line a task was defined on, so the scan reads the file's syntax tree:
a literal ``task_id="x"`` gives its line, an f-string ``task_id=f"load_{region}"`` a pattern, a
decorated function its ``def`` line, and a DAG its line (where a task without one is pointed at).
The same index names the tasks of a file whose syntax tree static analysis cannot use.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field

__all__ = ["FileIndex", "index_file"]


@dataclass
class FileIndex:
    """The task and DAG definitions of one file, as written."""

    literal: dict[str, int] = field(default_factory=dict)
    patterns: list[tuple[re.Pattern[str], int]] = field(default_factory=list)
    functions: dict[str, int] = field(default_factory=dict)
    dag_ids: list[tuple[str, int]] = field(default_factory=list)
    #: The first ``DAG(...)`` call or ``@dag`` function, whatever its id is written as.
    first_dag: int | None = None

    def line_of(self, task_id: str) -> int | None:
        base = task_id.rsplit(".", 1)[-1]  # a task group prefix
        for key in (task_id, base):
            if key in self.literal:
                return self.literal[key]
        for pattern, line in self.patterns:
            if pattern.fullmatch(task_id) or pattern.fullmatch(base):
                return line
        stem = re.sub(r"__\d+$", "", base)  # a TaskFlow task called twice: name__1
        return self.functions.get(stem)

    def dag_line(self, dag_id: str) -> int | None:
        """The line that defines ``dag_id``, else the file's first DAG definition (None: none found)."""
        for name, line in self.dag_ids:
            if name == dag_id:
                return line
        return self.dag_ids[0][1] if self.dag_ids else self.first_dag

    def task_ids(self) -> list[tuple[str, int]]:
        """Every task id written literally, and each TaskFlow function, for a file that fails to import."""
        found = dict(self.literal)
        for name, line in self.functions.items():
            found.setdefault(name, line)
        return sorted(found.items(), key=lambda kv: kv[1])


def _pattern(node: ast.JoinedStr) -> re.Pattern[str]:
    parts = [re.escape(str(v.value)) if isinstance(v, ast.Constant) else ".+" for v in node.values]
    return re.compile("".join(parts))


def _is_task_decorator(dec: ast.expr) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    text = ast.unparse(target)
    return text == "task" or text.startswith("task.")


@functools.lru_cache(maxsize=4096)
def index_file(path: str) -> FileIndex:
    """The index of ``path`` (empty when it cannot be read or parsed)."""
    index = FileIndex()
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return index
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "task_id":
                    if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                        index.literal.setdefault(kw.value.value, node.lineno)
                    elif isinstance(kw.value, ast.JoinedStr):
                        index.patterns.append((_pattern(kw.value), node.lineno))
                elif kw.arg == "dag_id" and isinstance(kw.value, ast.Constant):
                    index.dag_ids.append((str(kw.value.value), node.lineno))
            func = ast.unparse(node.func)
            if func.rsplit(".", 1)[-1] == "DAG":
                index.first_dag = min(index.first_dag or node.lineno, node.lineno)
            if func in {"DAG", "models.DAG"} and node.args and isinstance(node.args[0], ast.Constant):
                index.dag_ids.append((str(node.args[0].value), node.lineno))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if any(_is_task_decorator(d) for d in node.decorator_list):
                index.functions.setdefault(node.name, node.lineno)
            if any(
                ast.unparse(d.func if isinstance(d, ast.Call) else d) in {"dag", "sdk.dag"}
                for d in node.decorator_list
            ):
                index.dag_ids.append((node.name, node.lineno))
                index.first_dag = min(index.first_dag or node.lineno, node.lineno)
    return index
