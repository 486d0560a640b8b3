"""The scan's report as text (people), JSON (scripts, the UI) or SARIF 2.1.0 (code-scanning tools)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_crashsafe.scan.loader import ScanResult

__all__ = ["FORMATS", "render"]

FORMATS = ("text", "json", "sarif")
_SARIF_LEVEL = {"risky": "error", "unknown": "warning"}
_RULES = {
    "risky": "a re-run of this task changes the outside world again",
    "unknown": "nothing static can decide whether this task is safe to re-run",
}


def _text(result: ScanResult) -> str:
    lines: list[str] = []
    order = {"risky": 0, "unknown": 1, "safe": 2, "protected": 3}
    for t in sorted(result.tasks, key=lambda t: (order[t.verdict], t.dag_id, t.task_id)):
        where = f"{t.file}:{t.line}" if t.line else t.file
        lines.append(f"{t.verdict.upper():9} {t.dag_id}.{t.task_id}  [{t.category}]  {where}")
        if t.verdict in {"risky", "unknown"}:
            for r in t.reasons[:3]:
                at = f" ({r.file}:{r.line})" if r.line else ""
                lines.append(f"          - {r.why}{at}" + (f": {r.evidence}" if r.evidence else ""))
            if t.fix:
                lines.append(f"          fix: {t.fix}")
    for err in result.import_errors:
        lines.append(f"IMPORT    {err['file']}: {err['error']}")
    s = result.summary()
    lines.append(
        f"{s['tasks']} tasks in {s['dags']} DAGs: {s['risky']} risky, {s['unknown']} unknown, "
        f"{s['safe']} safe, {s['protected']} protected; {s['import_errors']} files failed to import"
    )
    return "\n".join(lines)


def _uri(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return Path(path).resolve().as_uri()


def _sarif(result: ScanResult) -> dict[str, Any]:
    from airflow_crashsafe import __version__

    results = []
    for t in result.tasks:
        if t.verdict not in _SARIF_LEVEL:
            continue
        why = "; ".join(r.why for r in t.reasons[:3])
        results.append(
            {
                "ruleId": f"crashsafe/{t.verdict}",
                "level": _SARIF_LEVEL[t.verdict],
                "message": {
                    "text": f"{t.dag_id}.{t.task_id} ({t.category}): {why}"
                    + (f" Fix: {t.fix}" if t.fix else "")
                },
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": _uri(t.file)},
                            "region": {"startLine": t.line or 1},
                        }
                    }
                ],
                "properties": {
                    "dag_id": t.dag_id,
                    "task_id": t.task_id,
                    "category": t.category,
                    "operator": t.operator,
                },
            }
        )
    rules = [
        {
            "id": f"crashsafe/{v}",
            "shortDescription": {"text": text},
            "help": {"text": "airflow-crashsafe's docs/scan.md: what each verdict means and how to fix it."},
        }
        for v, text in _RULES.items()
    ]
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {"name": "airflow-crashsafe scan", "version": __version__, "rules": rules}
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
