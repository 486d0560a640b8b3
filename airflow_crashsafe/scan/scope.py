"""What a name in a function body refers to: its bound value, its object, its library, its text.

A :class:`Names` is the part of a :class:`~airflow_crashsafe.scan.python_code.Scope` that reads
names without running anything: the values the body binds (:mod:`.names`, never in a loop), the
imports inside the body, the arguments a caller passed (a helper called with a SQL string), values
known from the task (``op_kwargs``, ``functools.partial``, a custom operator's attributes after
``__init__``), and the module's globals. :meth:`Names.origin` says which module a value comes
from, so a call on it can be judged by its library (:mod:`.libraries`).
"""

from __future__ import annotations

import ast
import builtins
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.scan import exprs
from airflow_crashsafe.scan.libraries import family_of_module, is_factory
from airflow_crashsafe.scan.names import Bindings, target_key
from airflow_crashsafe.scan.source_modules import file_imports, real_origin, source_object

if TYPE_CHECKING:
    from airflow_crashsafe.scan.python_code import Scope

__all__ = ["Names", "module_of", "safe_attr", "task_class"]

_MAX_DEPTH = 12


def safe_attr(obj: Any, name: str, default: Any = None) -> Any:
    """``getattr`` that treats any error as absence (a stand-in task may refuse to guess a value)."""
    try:
        return getattr(obj, name, default)
    except Exception:
        return default


def task_class(task: Any) -> type:
    """The operator class of a task: a mapped task's or a stand-in's ``operator_class``, else its type."""
    cls = safe_attr(task, "operator_class")
    return cls if isinstance(cls, type) else type(task)


def module_of(obj: Any) -> str | None:
    """The module an object belongs to: a module's name, a class's or function's, an instance's type's."""
    if inspect.ismodule(obj):
        return str(obj.__name__)
    module = getattr(obj, "__module__", None)
    if isinstance(module, str) and (inspect.isclass(obj) or callable(obj)):
        return module
    if isinstance(obj, str | int | float | bool | bytes | list | tuple | dict | set | type(None)):
        return "builtins"
    return getattr(type(obj), "__module__", None)


class Names:
    """Name reading for one function body (mixed into the walker that visits it)."""

    fn: Any
    file: str
    globals: dict[str, Any]
    #: Parameters bound by the caller: name -> (the caller's scope, the argument expression).
    args: dict[str, tuple[Scope, ast.expr]]
    #: Parameters or attributes known as Python values: name or ``self.attr`` -> value.
    values: dict[str, Any]
    #: The task a custom operator's ``execute`` runs on (its attributes after ``__init__``).
    bound: Any
    render: Callable[[Any], Any] | None

    def init_names(self, node: ast.AST) -> None:
        self.names = Bindings()
        self.imports: dict[str, str] = {}
        for sub in ast.walk(node):  # imports anywhere in the body, wherever the call is
            if isinstance(sub, ast.Import):
                for alias in sub.names:
                    self.imports[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0]
                    )
            elif isinstance(sub, ast.ImportFrom) and sub.module and not sub.level:
                for alias in sub.names:
                    self.imports[alias.asname or alias.name] = f"{sub.module}.{alias.name}"

    # -- bound values ---------------------------------------------------------------------

    @contextmanager
    def lookup(self, key: str) -> Iterator[tuple[ast.expr, Scope] | None]:
        """The expression ``key`` is bound to here, and the scope to read it in (None: not bound)."""
        if key in self.names:
            with self.names.read(key) as expr:
                yield (expr, self) if expr is not None else None  # type: ignore[misc]
            return
        if key in self.args:
            scope, expr = self.args[key]
            yield expr, scope
            return
        yield None

    def value_of(self, key: str) -> Any:
        """A Python value for ``key`` known without running the body (None when there is none)."""
        if key in self.values:
            return self.values[key]
        root, _, rest = key.partition(".")
        if root == "self" and rest and "." not in rest and self.bound is not None:
            try:
                value = getattr(self.bound, rest)
            except Exception:
                return None
            fields = tuple(safe_attr(self.bound, "template_fields", ()) or ())
            if self.render is not None and rest in fields:
                try:
                    return self.render(value)
                except Exception:
                    return None
            return value
        if root in self.names or root in self.args or root in self.imports or root == "self":
            return None
        obj: Any = self.globals.get(root)
        for part in rest.split(".") if rest else ():
            obj = getattr(obj, part, None)
        return obj

    def text_of(self, key: str) -> str | None:
        """``key``'s value as SQL-ish text: a string, or a list of strings joined as statements."""
        value = self.value_of(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
            return ";\n".join(value)
        return None

    # -- objects and libraries -----------------------------------------------------------

    def _root(self, root: str) -> Any:
        """What the first name of a dotted call is: a global, ``self``'s class, a local instance's class."""
        if root.endswith("()"):  # Exporter(...).ship(...): the class
            return self._root(root[:-2])
        if root == "self":
            if self.bound is not None:
                return task_class(self.bound)
            owner = (getattr(self.fn, "__qualname__", "") or "").split(".")[0]
            return self.globals.get(owner)
        with self.lookup(root) as found:
            if found is not None:
                expr, scope = found
                if isinstance(expr, ast.Call):  # client = PartnerClient(): the class's methods
                    cls = scope.resolve(expr.func)
                    return cls if inspect.isclass(cls) else None
                return None
        if root in self.imports:  # imported in the body: a module of the team's own is read from its file
            return source_object(self.imports[root])
        if root in self.names or root in self.args:
            return None
        if root in self.values:
            return self.values[root]
        known = self.globals.get(root)
        if known is None and root in file_imports(str(getattr(self, "file", "") or "")):
            return source_object(file_imports(str(self.file))[root])
        return known

    def resolve(self, node: ast.expr) -> Any:
        """The object a call's name refers to (a function, a method of a known class), else None."""
        parts = exprs.dotted(node).split(".")
        if not parts or not parts[0]:
            return None
        obj: Any = self._root(parts[0])
        for part in parts[1:]:
            if obj is None:
                return None
            try:
                obj = inspect.getattr_static(obj, part.removesuffix("()"))
            except AttributeError:
                return None
            if isinstance(obj, staticmethod | classmethod):
                obj = obj.__func__
        return obj

    def origin(self, node: ast.AST | None, depth: int = 0) -> str | None:
        """The module the value of ``node`` comes from (a client's library), None when not known.

        A call's result keeps its callee's origin only when the callee makes a handle (a class, a
        factory such as ``boto3.client`` or ``hook.get_conn``): what other calls return is data.
        """
        if node is None or depth > _MAX_DEPTH:
            return None
        if isinstance(node, ast.Await):
            return self.origin(node.value, depth + 1)
        if isinstance(node, ast.Subscript):  # client["db"]["orders"]: still the client
            return self.origin(node.value, depth + 1)
        if isinstance(node, ast.Call):
            name = exprs.dotted(node.func).rsplit(".", 1)[-1].removesuffix("()")
            if is_factory(name) or inspect.isclass(self.resolve(node.func)):
                return self.origin(node.func, depth + 1)
            base = self.origin(node.func, depth + 1)
            return base if base and family_of_module(base) == "builder" else None
        if isinstance(node, ast.Attribute):
            key = target_key(node)
            if key is not None:
                with self.lookup(key) as found:
                    if found is not None:
                        return found[1].origin(found[0], depth + 1)
            obj = self.resolve(node) if key is not None and not key.startswith("self.") else None
            if obj is not None:
                return module_of(obj)
            return self.origin(node.value, depth + 1)
        if isinstance(node, ast.Name):
            return self._origin_of_name(node.id, depth)
        return None

    def _origin_of_name(self, name: str, depth: int) -> str | None:
        with self.lookup(name) as found:
            if found is not None:
                return found[1].origin(found[0], depth + 1)
        if name in self.names or name in self.args:
            return None
        if name in self.imports:
            return real_origin(self.imports[name])
        if name == "self":
            if self.bound is not None:
                return module_of(task_class(self.bound))
            return getattr(self.fn, "__module__", None)
        if name in self.values:
            return module_of(self.values[name])
        known = self.globals.get(name)
        if known is not None or name in self.globals:
            return module_of(known)
        imported = file_imports(str(getattr(self, "file", "") or ""))
        if name in imported:  # a library the file imports, where the globals do not hold it
            return real_origin(imported[name])
        if hasattr(builtins, name):
            return "builtins"
        return None
