"""Shell: scratch files on the worker are not the outside world; ``>>`` into a kept file appends."""

from __future__ import annotations

import pytest

from airflow_crashsafe.scan.bash import classify_bash
from airflow_crashsafe.scan.model import combine


@pytest.mark.parametrize(
    ("command", "verdict", "category"),
    [
        ("rm -rf /tmp/drop && mkdir -p /tmp/drop && unzip -o /data/in.zip -d /tmp/drop", "safe", "pure"),
        ("sed -i 's/a/b/' /tmp/x.sql && iconv -f latin1 -t utf8 /tmp/x.csv > /tmp/y.csv", "safe", "pure"),
        ("echo {{ ds }} >> /mnt/share/processed_days.txt", "risky", "append"),
        ("echo started >> /tmp/run.log", "safe", "pure"),
        ("./load.sh", "unknown", "opaque_command"),
    ],
)
def test_shell_scratch_and_appends(command: str, verdict: str, category: str) -> None:
    """Local file utilities are pure; appending to a file outside /tmp is risky; scripts stay unknown."""
    found = combine(classify_bash(command, markers=["2031-07-14"]))
    assert (found.verdict, found.category) == (verdict, category)
