"""The team's own modules that are not loaded, read from their files (never imported).

A task often imports its helpers inside its body (``from anaplan.upload import transfer_data``),
and a file read from its syntax tree imports nothing at all; either way the helper's module is
not in ``sys.modules``. Importing it would run the team's code, so it is found on disk (under the
``sys.path`` entries, without importing a parent package), parsed, and its functions are handed
to the walker as :class:`SourceFunction` objects (a class, as a class of them) whose globals
resolve the module's other top-level functions and classes the same way and its imports by name
(:func:`~.scope.file_imports`).
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

from airflow_crashsafe.scan.libraries import LIBRARY_ROOTS

__all__ = ["SourceFunction", "file_imports", "function_source", "real_origin", "source_object"]


@functools.lru_cache(maxsize=1024)
def file_imports(path: str) -> dict[str, str]:
    """The top-level imports of a source file, alias -> dotted name (empty when it cannot be read).

    A function compiled from a file that did not import (the static path) has globals that do not
    hold the libraries the file imports; the file's own import statements still name them.
    """
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[str, str] = {}
    for node in tree.body:
        for sub in ast.walk(node) if isinstance(node, ast.If | ast.Try) else [node]:
            if isinstance(sub, ast.Import):
                for alias in sub.names:
                    out[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0]
                    )
            elif isinstance(sub, ast.ImportFrom) and sub.module and not sub.level:
                for alias in sub.names:
                    out[alias.asname or alias.name] = f"{sub.module}.{alias.name}"
    return out


@functools.lru_cache(maxsize=512)
def _find(module: str, paths: tuple[str, ...]) -> str | None:
    """The file of a module of the team's own, found on ``paths`` (not installed libraries') unimported."""
    parts = module.split(".")
    for entry in paths:
        root = str(Path(entry or ".").resolve())
        if root.startswith(LIBRARY_ROOTS):
            continue
        base = Path(root).joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return str(candidate)
    return None


@functools.lru_cache(maxsize=512)
def _definitions(path: str) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    return {
        n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


class SourceFunction:
    """A function of an unloaded module: its ``def`` and file, for the walker to read."""

    def __init__(
        self, module: str, node: ast.FunctionDef | ast.AsyncFunctionDef, path: str, qualname: str = ""
    ) -> None:
        self.__module__ = module
        self.__name__ = node.name
        self.__qualname__ = qualname or node.name
        self.__globals__ = SourceGlobals(module, path)
        self.crashsafe_source = (node, path)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{self.__module__}.{self.__name__} is read from its source, not called")


class SourceGlobals(dict[str, Any]):
    """A source function's globals: the module's other top-level functions, read on demand."""

    def __init__(self, module: str, path: str) -> None:
        super().__init__(__name__=module, __file__=path)
        self._module = module
        self._path = path

    def get(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        found = _definition(self._module, self._path, str(key))
        return default if found is None else found


def _definition(module: str, path: str, name: str) -> Any:
    """A top-level function as a :class:`SourceFunction`, a class as a class of such methods."""
    node = _definitions(path).get(name)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return SourceFunction(module, node, path)
    if isinstance(node, ast.ClassDef):
        methods = {
            m.name: SourceFunction(module, m, path, f"{node.name}.{m.name}")
            for m in node.body
            if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        return type(node.name, (), {"__module__": module, "__qualname__": node.name, **methods})
    return None


def source_object(dotted: str) -> Any:
    """The module, function or class ``dotted`` names, when it lives in a file on ``sys.path`` that
    is not loaded (None otherwise); a module comes with its top-level functions and classes."""
    if dotted in sys.modules:
        return None
    path = _find(dotted, tuple(sys.path))
    if path is not None:
        return _module(dotted, path)
    module, _, name = dotted.rpartition(".")
    if not module or module in sys.modules:
        return None
    path = _find(module, tuple(sys.path))
    return _definition(module, path, name) if path is not None else None


def _module(name: str, path: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = path
    for key in _definitions(path):
        setattr(module, key, _definition(name, path, key))
    return module


def real_origin(dotted: str, depth: int = 0) -> str:
    """Where a name imported from the team's module really comes from, through re-exports
    (``from team.db import create_engine``, when ``team/db.py`` imports it from sqlalchemy)."""
    module, _, name = dotted.rpartition(".")
    if not module or depth > 5 or module in sys.modules:
        return dotted
    path = _find(module, tuple(sys.path))
    if path is None or name in _definitions(path):
        return dotted
    imported = file_imports(path).get(name)
    return real_origin(imported, depth + 1) if imported else dotted


def function_source(fn: Any) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, str, int] | None:
    """A function's ``def`` (or lambda), its file, and the line offset of its source; None if unreadable."""
    read = getattr(fn, "crashsafe_source", None)
    if read is not None:  # a function of an unloaded module, read from its file (source_modules)
        return read[0], read[1], 0
    try:
        lines, first = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or "?"
    except (OSError, TypeError):
        return None
    text = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return node, file, first - 1
    return None
