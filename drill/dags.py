"""The drill's two DAGs, taken from the repository's ``dags_examples/``: the control and the crashsafe one.

Both load the same nightly revenue into their own schema and push the same payments to the two
vendors; only the operators differ. The drill copies them into its temporary dags folder and
knows their tasks by prefix: the long loads (caught mid-work by the crash) and the pushes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["DAGS", "EXAMPLES", "LONG_TASK_PREFIXES", "PUSH_PREFIX", "SIDE_TITLES", "dag_ids", "install"]

#: The repository's example DAGs (the drill runs from a checkout, not from the wheel).
EXAMPLES = Path(__file__).resolve().parents[1] / "dags_examples"
#: Side -> the report's column title. "plain" is the control, "crashsafe" is under test.
SIDE_TITLES = {"plain": "plain operators", "crashsafe": "crashsafe"}
#: Side -> (dag_id, warehouse schema).
DAGS = {
    "plain": ("nightly_revenue_plain", "drill_plain"),
    "crashsafe": ("nightly_revenue_crashsafe", "drill_crashsafe"),
}
LONG_TASK_PREFIXES = ("load_revenue_", "append_lines_", "merge_revenue_", "overwrite_lines_")
PUSH_PREFIX = "push_payment_"


def dag_ids(sides: list[str]) -> dict[str, str]:
    """Side -> dag_id for the sides that run."""
    return {side: DAGS[side][0] for side in sides}


def install(sides: list[str], dags_folder: Path) -> None:
    """Copy the DAG files of ``sides`` into ``dags_folder``."""
    dags_folder.mkdir(parents=True, exist_ok=True)
    for side in sides:
        shutil.copy(EXAMPLES / f"{DAGS[side][0]}.py", dags_folder)
