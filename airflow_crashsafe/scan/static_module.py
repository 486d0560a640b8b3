"""A Python module read from its syntax tree: its imports, constants, functions and classes.

Static analysis never runs a file that did not import, nor the user's modules it imports. Names
resolve through the module's top-level statements (``from x import Y as Z``, module aliases,
``NAME = ...``), into the repository's own modules (found under the DAGs folder, the plugins
folder and the config folder, as Airflow puts them on ``sys.path``), and otherwise to a dotted
name outside the repository (an installed library, looked up only by :mod:`.static_classes`).

The rules read callables from their source (:mod:`.python_code`). A function of a file that did
not import is given to them as a *static function*: a real function object compiled from its
``def`` alone, without decorators, default values or annotations, so creating it runs none of the
user's code, whose globals resolve names through this module's syntax tree (:class:`Globals`).
Its source is read from the file like any other function's.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import sys
import sysconfig
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_crashsafe.scan.static_classes import external_class, mirror, stand_in
from airflow_crashsafe.scan.static_functions import Globals, ModuleProxy, bind_arguments, compile_function
from airflow_crashsafe.scan.static_values import (
    RETURNS_ATTR,
    LocalEnv,
    Unresolved,
    evaluate,
    has_unresolved,
)

__all__ = ["Ref", "Roots", "StaticModule"]

Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass(frozen=True)
class Ref:
    """What a name refers to: ``value`` (an assigned expression), ``function``, ``class``,
    ``module`` (a repository module), ``method`` (a function in a class body) or ``external``
    (a dotted name outside the repository)."""

    kind: str
    module: StaticModule | None = None
    node: Any = None
    qualname: str = ""


class Roots:
    """The folders the repository's modules are imported from, and the modules read so far.

    ``folders`` are the ones Airflow puts on ``sys.path``; ``extra`` the checkouts around them and
    ``PYTHONPATH``. A top-level name an installed library answers to is never looked up in them
    (a repository's ``airflow/`` folder never hides the installed ``airflow``, just as Airflow
    appends its folders after the installed packages).
    """

    def __init__(self, folders: Sequence[str], extra: Sequence[str] = ()) -> None:
        self.folders = [Path(f).resolve() for f in dict.fromkeys(folders) if f and Path(f).is_dir()]
        self.extra = [p for p in (Path(f).resolve() for f in extra) if p.is_dir() and p not in self.folders]
        self._by_path: dict[Path, StaticModule | None] = {}
        self._classes: dict[int, type] = {}

    def module_at(self, path: str | Path) -> StaticModule | None:
        """The module in ``path`` (None when it cannot be read or parsed)."""
        resolved = Path(path).resolve()
        if resolved not in self._by_path:
            try:
                tree = ast.parse(resolved.read_text(encoding="utf-8", errors="replace"), str(resolved))
            except (OSError, SyntaxError, ValueError):
                self._by_path[resolved] = None
            else:
                self._by_path[resolved] = StaticModule(resolved, tree, self)
        return self._by_path[resolved]

    def _roots_for(self, top: str) -> list[Path]:
        return [] if _installed(top) else [*self.folders, *self.extra]

    def find(self, dotted: str) -> StaticModule | None:
        """The repository module ``dotted`` (``common.sql_helpers``), if one is under a root."""
        rel = Path(*dotted.split("."))
        for root in self._roots_for(dotted.split(".")[0]):
            for path in (root / f"{rel}.py", root / rel / "__init__.py"):
                if path.is_file():
                    return self.module_at(path)
        return None

    def is_repo(self, top: str) -> bool:
        """True when the top-level module ``top`` is the repository's own (a file or folder in a root)."""
        return any((root / f"{top}.py").is_file() or (root / top).is_dir() for root in self._roots_for(top))

    def dotted_of(self, path: Path) -> str | None:
        for root in [*self.folders, *self.extra]:
            try:
                rel = path.relative_to(root)
            except ValueError:
                continue
            parts = list(rel.with_suffix("").parts)
            if parts and parts[-1] == "__init__":
                parts.pop()
            return ".".join(parts)
        return None

    def qualified(self, qualname: str) -> Ref | None:
        """What the dotted name ``qualname`` (from an import) refers to."""
        parts = qualname.split(".")
        for i in range(len(parts), 0, -1):
            module = self.find(".".join(parts[:i]))
            if module is not None:
                ref: Ref | None = Ref("module", module)
                for part in parts[i:]:
                    ref = member(ref, part)
                return ref
        if self.is_repo(parts[0]):
            return None  # the repository's, but not a module the scan can find
        return Ref("external", qualname=qualname)

    def class_of(self, ref: Ref) -> type:
        """A class standing for ``ref``: a repository class read from its tree, else the installed one."""
        if ref.kind == "external":
            return external_class(ref.qualname, self.is_repo).cls
        if ref.kind != "class" or ref.module is None:
            return stand_in("Unknown", "", f"{ref.qualname or ref.kind} is not a class the scan can read")
        key = id(ref.node)
        if key not in self._classes:
            self._classes[key] = stand_in(ref.node.name, ref.module.name, "a class whose bases recurse")
            self._classes[key] = ref.module.build_class(ref.node)
        return self._classes[key]


_LIBRARIES = tuple(
    str(Path(p).resolve())
    for key in ("purelib", "platlib", "stdlib")
    if (p := sysconfig.get_paths().get(key))
)
#: Installed here and never the user's code, wherever the checkout puts them on the path.
_OURS = frozenset({"airflow", "airflow_crashsafe"})


@functools.cache
def _installed(top: str) -> bool:
    """True when ``top`` is an installed library (site-packages, the standard library, or ours)."""
    if top in _OURS or top in sys.builtin_module_names:
        return True
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    places = [spec.origin, *(spec.submodule_search_locations or [])]
    return any(p and str(Path(p).resolve()).startswith(_LIBRARIES) for p in places)


def member(ref: Ref | None, name: str) -> Ref | None:
    """``ref.name``: a module's binding or submodule, a class's method, a longer external name."""
    if ref is None:
        return None
    if ref.kind == "module" and ref.module is not None:
        found = ref.module.local(name)
        if found is None:
            dotted = ref.module.dotted
            sub = ref.module.roots.find(f"{dotted}.{name}") if dotted else None
            found = Ref("module", sub) if sub is not None else None
        return found
    if ref.kind == "class" and ref.module is not None:
        for stmt in ref.node.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
                return Ref("method", ref.module, stmt, f"{ref.node.name}.{name}")
        return None
    if ref.kind == "external":
        return Ref("external", qualname=f"{ref.qualname}.{name}")
    return None


class StaticModule:
    """One module's top-level bindings, read from its syntax tree (nothing in it is run)."""

    def __init__(self, path: Path, tree: ast.Module, roots: Roots) -> None:
        self.path = path
        self.tree = tree
        self.roots = roots
        self.dotted = roots.dotted_of(path) or ""
        digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
        self.name = f"_crashsafe_static_{digest}_{path.stem}"
        self.imports: dict[str, str] = {}
        self.bindings: dict[str, Any] = {}
        self.ambiguous: set[str] = set()
        self.star: list[str] = []
        self._values: dict[str, Any] = {}
        self._functions: dict[int, types.FunctionType] = {}
        self._returning: set[int] = set()
        self._proxy: types.ModuleType | None = None
        for stmt in tree.body:
            self._collect(stmt, nested=False)

    # -- reading the top level ------------------------------------------------------------

    def _bind(self, name: str, node: Any, nested: bool) -> None:
        if name in self.bindings and (nested or name in self.imports):
            self.ambiguous.add(name)
        self.bindings[name] = node

    def import_base(self, stmt: ast.ImportFrom) -> str:
        """The module an ``import from`` statement names, relative imports resolved."""
        if not stmt.level:
            return stmt.module or ""
        package = self.dotted.split(".") if self.dotted else []
        if self.path.name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - (stmt.level - 1)] if stmt.level > 1 else package
        return ".".join([*package, *([stmt.module] if stmt.module else [])])

    def _collect(self, stmt: ast.stmt, nested: bool) -> None:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                local = alias.asname or alias.name.split(".")[0]
                self.imports.setdefault(local, alias.name if alias.asname else local)
        elif isinstance(stmt, ast.ImportFrom):
            base = self.import_base(stmt)
            for alias in stmt.names:
                if alias.name == "*":
                    self.star.append(base)
                else:
                    self.imports.setdefault(alias.asname or alias.name, f"{base}.{alias.name}")
        elif isinstance(stmt, Definition):
            self._bind(stmt.name, stmt, nested)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                self._assign(target, stmt.value, nested)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self._assign(stmt.target, stmt.value, nested)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            self.ambiguous.add(stmt.target.id)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            for item in stmt.items:
                if isinstance(item.optional_vars, ast.Name):
                    self._bind(item.optional_vars.id, item.context_expr, nested)
            for inner in stmt.body:
                self._collect(inner, nested)
        elif isinstance(stmt, ast.If | ast.For | ast.While | ast.Try):
            for inner in [*stmt.body, *getattr(stmt, "orelse", []), *getattr(stmt, "finalbody", [])]:
                self._collect(inner, nested=True)

    def _assign(self, target: ast.expr, value: ast.expr, nested: bool) -> None:
        if isinstance(target, ast.Name):
            self._bind(target.id, value, nested)
        elif isinstance(target, ast.Tuple | ast.List):
            if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts, strict=True):
                    self._assign(t, v, nested)
            else:
                for t in target.elts:
                    if isinstance(t, ast.Name):
                        self.ambiguous.add(t.id)

    # -- resolving names ------------------------------------------------------------------

    def local(self, name: str) -> Ref | None:
        """What a top-level name of this module refers to (None: ambiguous or not bound here)."""
        if name in self.ambiguous:
            return None
        node = self.bindings.get(name)
        if isinstance(node, ast.ClassDef):
            return Ref("class", self, node, name)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return Ref("function", self, node, name)
        if node is not None:
            return Ref("value", self, node, name)
        if name in self.imports:
            return self.roots.qualified(self.imports[name])
        for base in self.star:
            module = self.roots.find(base)
            found = module.local(name) if module is not None and module is not self else None
            if found is not None:
                return found
        return None

    def resolve(self, dotted: str) -> Ref | None:
        head, *rest = dotted.split(".")
        ref = self.local(head)
        for part in rest:
            ref = member(ref, part)
        return ref

    def lookup(self, name: str) -> Any:
        """A name's value for :func:`.static_values.evaluate` (an :class:`Unresolved` if not known)."""
        if name == "__file__":
            return str(self.path)
        if name in self._values:
            return self._values[name]
        ref = self.resolve(name)
        if ref is not None and ref.kind in {"function", "method"} and ref.module is not None:
            fn = ref.module.function(ref.node, ref.qualname)
            return fn if fn is not None else Unresolved(name)
        if ref is None or ref.kind != "value" or ref.module is None:
            return Unresolved(name)
        if ref.module is not self:
            return ref.module.lookup(ref.qualname)
        self._values[name] = Unresolved(name)  # a name defined through itself stays unknown
        self._values[name] = evaluate(ref.node, self)
        return self._values[name]

    # -- static functions and classes ------------------------------------------------------

    def proxy(self) -> types.ModuleType:
        """This module as a module object (registered, so the rules see it is the user's code)."""
        if self._proxy is None:
            self._proxy = ModuleProxy(self)
            sys.modules[self.name] = self._proxy
        return self._proxy

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, qualname: str = "") -> Any:
        """A static function for ``node`` (None when its ``def`` does not compile on its own)."""
        key = id(node)
        if key not in self._functions:
            self.proxy()
            fn = compile_function(node, str(self.path), Globals(self))
            if fn is None:
                return None
            fn.__qualname__ = qualname or getattr(node, "name", "<lambda>")
            setattr(fn, RETURNS_ATTR, functools.partial(self._returned, node))
            self._functions[key] = fn
        return self._functions[key]

    def _returned(self, node: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """What ``node`` returns for these arguments, when its body is one ``return`` (else unknown)."""
        body = getattr(node, "body", None)
        if isinstance(body, list):
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]  # its docstring
            if len(body) != 1 or not isinstance(body[0], ast.Return):
                return Unresolved(f"{getattr(node, 'name', 'lambda')}(...)")
            expr = body[0].value
        else:
            expr = body
        key = id(node)
        if key in self._returning:
            return Unresolved(f"{getattr(node, 'name', 'lambda')}(...)")
        self._returning.add(key)
        try:
            return evaluate(expr, LocalEnv(bind_arguments(node.args, args, kwargs, self), self))
        finally:
            self._returning.discard(key)

    def build_class(self, node: ast.ClassDef) -> type:
        """A class with ``node``'s name, bases (read or mirrored), methods and constant attributes."""
        bases: list[type] = []
        for base in node.bases:
            ref = self.resolve(ast.unparse(base)) if isinstance(base, ast.Name | ast.Attribute) else None
            if ref is None:
                continue
            cls = self.roots.class_of(ref)
            bases.append(mirror(cls) if ref.kind == "external" and _is_real(cls) else cls)
        namespace: dict[str, Any] = {"__module__": self.name, "__qualname__": node.name}
        for stmt in node.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                fn = self.function(stmt, f"{node.name}.{stmt.name}")
                if fn is not None:
                    namespace[stmt.name] = fn
            elif (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
            ):
                value = evaluate(stmt.value, self)
                if not has_unresolved(value):
                    namespace[stmt.targets[0].id] = value
        self.proxy()
        try:
            return type(node.name, tuple(bases), namespace)
        except TypeError:  # bases whose order cannot be merged: the first line of ancestry
            return type(node.name, tuple(bases[:1]), namespace)

    def runtime_value(self, name: str) -> Any:
        """What a static function sees for a global name: a static function, class, module or constant."""
        ref = self.resolve(name)
        if ref is None:
            return None
        if ref.kind in {"function", "method"} and ref.module is not None:
            return ref.module.function(ref.node, ref.qualname)
        if ref.kind == "class" and ref.module is not None:
            return self.roots.class_of(ref)
        if ref.kind == "module" and ref.module is not None:
            return ref.module.proxy()
        if ref.kind == "value" and ref.module is not None:
            value = ref.module.lookup(ref.qualname)
            return None if has_unresolved(value) else value
        return None


def _is_real(cls: type) -> bool:
    """True for an installed class (not a mirror or stand-in made by the scan)."""
    module = sys.modules.get(cls.__module__)
    return module is not None and getattr(module, cls.__name__, None) is cls
