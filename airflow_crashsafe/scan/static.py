"""Judge the tasks of a file that did not import, from its syntax tree, with the same rules.

:mod:`.static_dags` finds the DAGs and tasks and builds a :class:`~.static_task.StaticTask` for
each; :func:`~airflow_crashsafe.scan.rules.classify_task` judges it exactly as it judges an
imported task. Every verdict is marked ``"analysis": "static"`` and ends with a reason saying why
the file was read this way.
"""

from __future__ import annotations

from airflow_crashsafe.scan.model import Reason, TaskVerdict, worst
from airflow_crashsafe.scan.rules import classify_task
from airflow_crashsafe.scan.static_dags import find_tasks
from airflow_crashsafe.scan.static_module import Roots

__all__ = ["judge_file"]


def judge_file(path: str, roots: Roots, why: str) -> list[TaskVerdict]:
    """Every task the syntax tree of ``path`` names, judged; empty when none can be named.

    ``why`` says why the file is read statically (its import error), for the last reason.
    """
    module = roots.module_at(path)
    if module is None:
        return []
    _, found = find_tasks(module)
    verdicts: list[TaskVerdict] = []
    for f in found:
        here = f.file == str(module.path)
        line = f.site or (f.line if here else f.dag.line)
        judged = [(task, classify_task(task, task.dag)) for task in [f.task, *f.alternatives]]
        verdict = worst(found.verdict for _, found in judged)
        task, finding = next((t, found) for t, found in judged if found.verdict == verdict)
        reasons = [r.located(f.file, f.line) for r in finding.reasons]
        note = task.class_info.note
        if f.alternatives:
            names = " or ".join(t.class_info.written for t in [f.task, *f.alternatives])
            reasons.append(
                Reason(f"its operator is {names} (the tree does not say which): the worse verdict")
            )
        if note:
            reasons.append(Reason(note, file=f.file, line=f.line))
        reasons.append(Reason(f"read from the syntax tree: {why}", file=path, line=line))
        verdicts.append(
            TaskVerdict(
                f.dag.dag_id,
                f.task.task_id,
                path,
                line,
                task.class_info.written,
                finding.verdict,
                finding.category,
                reasons,
                finding.fix,
                analysis="static",
            )
        )
    return verdicts
