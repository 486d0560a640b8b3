"""The package's layout rules: what may import what, where crashsafe's SQL lives, what the wheel holds.

See docs/design.md, "Where to start reading" and "Store". Every check reads the source as text or
as a syntax tree; only the wheel check builds and installs anything.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_crashsafe"
STORE = PACKAGE / "store"

#: Tables that must be found, so the SQL check can never pass by finding no tables at all.
KNOWN_TABLES = {
    "crashsafe_attempts",
    "crashsafe_events",
    "crashsafe_fences",
    "crashsafe_ledger",
    "crashsafe_schema_version",
    "crashsafe_units",
}
SQL_KEYWORD_THEN_TABLE = (
    r"\b(?:SELECT|INSERT|UPDATE|DELETE|FROM|JOIN|INTO|TABLE)\s+(?:IF\s+NOT\s+EXISTS\s+)?({tables})\b"
)
OUTSIDE_REFERENCE = re.compile(r"ARCHITECTURE|\.\./shared|\b(?:issue|decisions?)\s+\d+", re.IGNORECASE)


def _modules(root: Path) -> Iterator[Path]:
    yield from sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(module: str) -> str:
    """The package a module belongs to: itself for a package, else its parent."""
    path = ROOT.joinpath(*module.split("."))
    return module if path.is_dir() else module.rpartition(".")[0]


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[ast.stmt, list[str]]]:
    """Each import statement with the modules it may name, relative imports resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield node, [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            # `from airflow_crashsafe import drill` names a module through its alias
            yield node, [name, *(f"{name}.{alias.name}" for alias in node.names)]


def _docstring_nodes(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _table_constants() -> dict[str, str]:
    """``FENCE_TABLE = "crashsafe_fences"`` and the like, assigned anywhere in ``store/``."""
    constants: dict[str, str] = {}
    for path in _modules(STORE):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                value = node.value.value
                for target in node.targets:
                    if (
                        isinstance(target, ast.Name)
                        and isinstance(value, str)
                        and value.startswith("crashsafe_")
                    ):
                        constants[target.id] = value
    return constants


def _store_tables(constants: dict[str, str]) -> set[str]:
    """Every table the store creates: named in a ``CREATE TABLE`` literally, or a ``*_TABLE`` constant."""
    tables = {value for name, value in constants.items() if name.endswith("_TABLE")}
    for path in _modules(STORE):
        for match in re.finditer(r"CREATE TABLE (?:IF NOT EXISTS )?(\{?\w+\}?)", path.read_text()):
            name = match.group(1)
            tables.add(constants.get(name.strip("{}"), name))
    return {t for t in tables if t.startswith("crashsafe_")}


def _literal_text(node: ast.AST, constants: dict[str, str]) -> str | None:
    """A string literal's text; an f-string's with table constants filled in (others as ``{}``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.JoinedStr):
        return None
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value))
        elif isinstance(value, ast.FormattedValue):
            expr = value.value
            name = expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", "")
            parts.append(constants.get(name, "{}"))
    return "".join(parts)


def test_package_does_not_import_drill() -> None:
    """Nothing under airflow_crashsafe/ imports the drill, statically or by a module-name string."""
    drill = re.compile(r"^(?:airflow_crashsafe\.)?drill(?:\.\w+)*$")
    dynamic = re.compile(r"^(?:airflow_crashsafe\.drill|drill\.\w+)(?:\.\w+)*$")
    found = []
    for path in _modules(PACKAGE):
        tree = ast.parse(path.read_text())
        module = _module_name(path)
        for node, names in _imports(tree, module, path.name == "__init__.py"):
            if any(drill.match(name) for name in names):
                found.append(f"{_rel(path)}:{node.lineno} {ast.unparse(node)}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and dynamic.match(node.value):
                found.append(f"{_rel(path)}:{node.lineno} names module {node.value!r}")
    assert not found, "the drill is not part of the package:\n" + "\n".join(sorted(set(found)))


def test_only_store_holds_sql_against_crashsafe_tables() -> None:
    """Outside store/, no string literal holds SQL (a keyword, then a crashsafe table) against our tables."""
    constants = _table_constants()
    tables = _store_tables(constants)
    assert tables >= KNOWN_TABLES, f"store/ no longer creates {sorted(KNOWN_TABLES - tables)}"
    pattern = re.compile(SQL_KEYWORD_THEN_TABLE.format(tables="|".join(sorted(tables))))
    found = []
    for path in _modules(PACKAGE):
        if STORE in path.parents:
            continue
        tree = ast.parse(path.read_text())
        docstrings = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in docstrings:
                continue
            text = _literal_text(node, constants)
            match = pattern.search(text) if text else None
            if match:
                found.append(f"{_rel(path)}:{getattr(node, 'lineno', '?')} {match.group(0)!r}")
    assert not found, "SQL against crashsafe's tables outside store/:\n" + "\n".join(sorted(set(found)))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_uses(path: Path) -> Iterator[str]:
    """``from airflow_crashsafe.x import _y`` and ``x._y`` on an imported airflow_crashsafe module."""
    tree = ast.parse(path.read_text())
    own = _module_name(path)
    modules: dict[str, str] = {}  # local name -> the airflow_crashsafe module it is bound to
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and (node.module or "").startswith("airflow_crashsafe")
        ):
            private = [a.name for a in node.names if _is_private(a.name)]
            if private and node.module != own:
                yield f"{node.lineno} from {node.module} import {', '.join(private)}"
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                if _is_module(candidate):
                    modules[alias.asname or alias.name] = candidate
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("airflow_crashsafe") and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and _is_private(node.attr)
        ):
            yield f"{node.lineno} {node.value.id}.{node.attr} (of {modules[node.value.id]})"


def _is_module(dotted: str) -> bool:
    relative = Path(*dotted.split("."))
    return (ROOT / relative).with_suffix(".py").is_file() or (ROOT / relative / "__init__.py").is_file()


def test_no_module_uses_another_modules_private_name() -> None:
    """No module imports, or reads through a module it imported, another module's underscore-private name."""
    found = [
        f"{_rel(path)}:{use}"
        for root in (PACKAGE, ROOT / "benchmarks", ROOT / "drill")
        if root.is_dir()
        for path in _modules(root)
        for use in _private_uses(path)
    ]
    assert not found, "make these public where they belong, or move them:\n" + "\n".join(found)


def test_no_reference_to_documents_outside_the_repository() -> None:
    """No docstring or comment under airflow_crashsafe/ cites ARCHITECTURE, an issue or a decision number."""
    found = [
        f"{_rel(path)}:{number}: {line.strip()}"
        for path in _modules(PACKAGE)
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if OUTSIDE_REFERENCE.search(line)
    ]
    assert not found, "point to docs/design.md instead:\n" + "\n".join(found)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_built_wheel_installs_and_runs_without_the_repository(tmp_path: Path) -> None:
    """The wheel holds no drill, installs into a fresh venv, and its `airflow-crashsafe --help` works."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet"),
            *("--wheel-dir", str(wheels), str(ROOT)),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("airflow_crashsafe-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "airflow_crashsafe/cli/main.py" in names

    # A fresh venv that sees the shared environment's dependencies but not the repository: a plain
    # path line in a .pth file does not process that directory's own .pth files, so the editable
    # install's pointer to the checkout stays out of sys.path.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "shared-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120, check=False
        )

    # --ignore-installed: the shared environment's editable install is visible, and must be neither
    # taken as "already satisfied" nor uninstalled.
    install = run(str(python), "-m", "pip", "install", "--no-deps", "--ignore-installed", "-q", str(wheel))
    assert install.returncode == 0, install.stderr
    probe = "import json, sys, airflow_crashsafe; print(json.dumps([airflow_crashsafe.__file__, sys.path]))"
    where = run(str(python), "-c", probe)
    assert where.returncode == 0, where.stderr
    imported_from, path = json.loads(where.stdout)
    assert imported_from.startswith(purelib + os.sep), imported_from
    assert str(ROOT) not in path, f"the repository leaked into the fresh venv's sys.path: {path}"

    cli = run(str(venv / "bin" / "airflow-crashsafe"), "--help")
    assert cli.returncode == 0, cli.stderr
    assert "usage: airflow-crashsafe" in cli.stdout
    assert not [n for n in names if n.startswith(("drill/", "airflow_crashsafe/drill/"))], "the drill ships"
