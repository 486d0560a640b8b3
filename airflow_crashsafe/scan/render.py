"""The scan's report as text (people), JSON (scripts, the UI) or SARIF 2.1.0 (code-scanning tools)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.scan.categories import describe
from airflow_crashsafe.scan.lines import index_file

if TYPE_CHECKING:
    from airflow_crashsafe.scan.loader import ScanResult
    from airflow_crashsafe.scan.model import TaskVerdict

__all__ = ["FORMATS", "render"]

FORMATS = ("text", "json", "sarif")
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_SARIF_LEVEL = {"risky": "error", "unknown": "warning"}
_FILE_LABEL = {"import_error": "IMPORT", "crashed": "CRASHED", "timed_out": "TIMEOUT"}
_DOCS = "https://github.com/airflow-crashsafe/airflow-crashsafe/blob/main/docs/scan.md"


def _text(result: ScanResult) -> str:
    lines: list[str] = []
    order = {"risky": 0, "unknown": 1, "safe": 2, "protected": 3}
    for t in sorted(result.tasks, key=lambda t: (order[t.verdict], t.dag_id, t.task_id)):
        where = f"{t.file}:{t.line}" if t.line else t.file
        static = "  (static)" if t.analysis == "static" else ""
        lines.append(f"{t.verdict.upper():9} {t.dag_id}.{t.task_id}  [{t.category}]  {where}{static}")
        if t.verdict in {"risky", "unknown"}:
            for r in t.reasons[:3]:
                at = f" ({r.file}:{r.line})" if r.line else ""
                lines.append(f"          - {r.why}{at}" + (f": {r.evidence}" if r.evidence else ""))
            if t.fix:
                lines.append(f"          fix: {t.fix}")
    failed = [f for f in result.files if f.failed]
    for f in failed:
        lines.append(f"{_FILE_LABEL.get(f.status, 'IMPORT'):9} {f.file}: {f.error}")
    s = result.summary()
    lines.append(
        f"{s['tasks']} tasks in {s['dags']} DAGs: {s['risky']} risky, {s['unknown']} unknown, "
        f"{s['safe']} safe, {s['protected']} protected; {s['import_errors']} files failed to import"
    )
    if failed:
        status = s["file_status"]
        lines.append(
            f"{len(failed)} of {s['files']} files were not imported ({status['import_error']} import errors, "
            f"{status['crashed']} crashed, {status['timed_out']} timed out): {s['static']} of their tasks "
            "were read from their syntax tree, and the gate fails until they import"
        )
    return "\n".join(lines)


def _uri(path: str) -> str:
    try:
        return Path(path).resolve().relative_to(Path.cwd()).as_posix()
    except ValueError:
        return Path(path).resolve().as_uri()


def _location(file: str, line: int | None) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(file)}}
    if line:
        physical["region"] = {"startLine": line}
    return {"physicalLocation": physical}


def _task_line(t: TaskVerdict) -> int | None:
    """The task's line; else its DAG's (the scan names the task, Airflow kept no line for it)."""
    return t.line or index_file(t.file).dag_line(t.dag_id)


def _rule(category: str, verdict: str) -> dict[str, Any]:
    text = describe(category, verdict)
    return {
        "id": f"crashsafe/{category}",
        "name": "".join(part.title() for part in category.split("_")),
        "shortDescription": {"text": text.short},
        "fullDescription": {"text": text.meaning},
        "help": {
            "text": f"{text.meaning} Fix: {text.fix}.",
            "markdown": f"{text.meaning}\n\n**Fix:** {text.fix}.",
        },
        "helpUri": _DOCS,
        "defaultConfiguration": {"level": _SARIF_LEVEL.get(text.verdict, "warning")},
        "properties": {"verdict": text.verdict, "tags": ["airflow", "idempotency", text.verdict]},
    }


def _sarif(result: ScanResult) -> dict[str, Any]:
    from airflow_crashsafe import __version__

    rules: dict[str, dict[str, Any]] = {}
    index: dict[str, int] = {}

    def rule_id(category: str, verdict: str) -> tuple[str, int]:
        if category not in rules:
            rules[category] = _rule(category, verdict)
            index[category] = len(index)
        return rules[category]["id"], index[category]

    results: list[dict[str, Any]] = []
    for t in result.tasks:
        if t.verdict not in _SARIF_LEVEL or t.task_id == "*":  # "*": the file's own result says it
            continue
        rid, at = rule_id(t.category, t.verdict)
        why = "; ".join(r.why for r in t.reasons[:3])
        results.append(
            {
                "ruleId": rid,
                "ruleIndex": at,
                "level": _SARIF_LEVEL[t.verdict],
                "message": {
                    "text": f"{t.dag_id}.{t.task_id} is {t.verdict} ({t.category}): {why}"
                    + (f" Fix: {t.fix}" if t.fix else "")
                },
                "locations": [_location(t.file, _task_line(t))],
                "properties": {
                    "dag_id": t.dag_id,
                    "task_id": t.task_id,
                    "verdict": t.verdict,
                    "category": t.category,
                    "operator": t.operator,
                    "analysis": t.analysis,
                },
            }
        )
    for f in result.files:
        if not f.failed:
            continue
        rid, at = rule_id("import_error", "unknown")
        results.append(
            {
                "ruleId": rid,
                "ruleIndex": at,
                "level": "error",
                "message": {"text": f"The file was not imported ({f.status}): {f.error}"},
                "locations": [_location(f.file, index_file(f.file).first_dag)],
                "properties": {"status": f.status},
            }
        )
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "airflow-crashsafe scan",
                        "version": __version__,
                        "informationUri": _DOCS,
                        "rules": list(rules.values()),
                    }
                },
                "results": results,
            }
        ],
    }


def render(result: ScanResult, fmt: str) -> str:
    """The report in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "json":
        return json.dumps(result.as_dict(), indent=2)
    if fmt == "sarif":
        return json.dumps(_sarif(result), indent=2)
    return _text(result)
