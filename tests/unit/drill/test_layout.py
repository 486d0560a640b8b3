"""The drill lives beside the package, not in it: the wheel neither ships nor needs it."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_package_never_imports_the_drill() -> None:
    """No module under airflow_crashsafe/ imports drill (the wheel does not carry it)."""
    offenders = [
        str(path.relative_to(REPO))
        for path in (REPO / "airflow_crashsafe").rglob("*.py")
        if any(name == "drill" or name.startswith("drill.") for name in _imported(path))
    ]
    assert offenders == []
    assert not (REPO / "airflow_crashsafe" / "drill").exists()


def test_the_wheel_ships_only_the_package() -> None:
    """pyproject's wheel target holds airflow_crashsafe alone; mypy checks the drill like the package."""
    config = (REPO / "pyproject.toml").read_text()
    wheel = config.split("[tool.hatch.build.targets.wheel]", 1)[1].split("\n[", 1)[0]
    assert [line.split("#")[0].strip() for line in wheel.splitlines() if line.startswith("packages")] == [
        'packages = ["airflow_crashsafe"]'
    ]
    mypy = config.split("[tool.mypy]", 1)[1].split("\n[", 1)[0]
    assert '"drill"' in next(line for line in mypy.splitlines() if line.startswith("files"))
