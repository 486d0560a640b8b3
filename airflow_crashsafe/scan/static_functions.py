"""Static functions: a function object compiled from its ``def`` alone, so making it runs nothing.

Also the namespace such a function sees (:class:`Globals`, :class:`ModuleProxy`: names answered
from the module's syntax tree) and the binding of a call's arguments to its parameters.

The ``def`` is compiled without its decorators, default values and annotations, and the function's
code object is taken from the compiled module's constants: no statement of the user's file is
executed, not even the ``def`` itself. The rules read the function's source from its file, as
they read any function's (:mod:`.python_code`).
"""

from __future__ import annotations

import ast
import types
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.scan.static_values import Env, Unresolved, evaluate

if TYPE_CHECKING:
    from airflow_crashsafe.scan.static_module import StaticModule

__all__ = ["Globals", "ModuleProxy", "bind_arguments", "compile_function"]


def _strip_args(args: ast.arguments) -> ast.arguments:
    def bare(a: ast.arg) -> ast.arg:
        return ast.copy_location(ast.arg(arg=a.arg, annotation=None), a)

    none = ast.Constant(None)
    return ast.arguments(
        posonlyargs=[bare(a) for a in args.posonlyargs],
        args=[bare(a) for a in args.args],
        vararg=bare(args.vararg) if args.vararg else None,
        kwonlyargs=[bare(a) for a in args.kwonlyargs],
        kw_defaults=[none if d is not None else None for d in args.kw_defaults],
        kwarg=bare(args.kwarg) if args.kwarg else None,
        defaults=[none for _ in args.defaults],
    )


def compile_function(node: Any, filename: str, globals_: dict[str, Any]) -> types.FunctionType | None:
    """The function ``node`` defines, compiled alone: no decorator, default or annotation is evaluated."""
    if isinstance(node, ast.Lambda):
        bare: Any = ast.Lambda(args=_strip_args(node.args), body=node.body)
        wrapper: Any = ast.Expression(body=ast.copy_location(bare, node))
        mode = "eval"
    else:
        fields = {f: getattr(node, f) for f in node._fields}
        fields.update(decorator_list=[], returns=None, args=_strip_args(node.args))
        bare = ast.copy_location(type(node)(**fields), node)
        wrapper = ast.Module(body=[bare], type_ignores=[])
        mode = "exec"
    ast.fix_missing_locations(wrapper)
    try:
        code = compile(wrapper, filename, mode, dont_inherit=True)
    except (SyntaxError, ValueError, TypeError):
        return None
    name = getattr(node, "name", "<lambda>")
    inner = next((c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == name), None)
    if inner is None or inner.co_freevars:
        return None
    return types.FunctionType(inner, globals_, name)


class Globals(dict[str, Any]):
    """A static function's globals: every lookup is answered from the module's syntax tree."""

    def __init__(self, module: StaticModule) -> None:
        super().__init__(__name__=module.name, __file__=str(module.path))
        self._module = module

    def get(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        found = self._module.runtime_value(str(key))
        return default if found is None else found


class ModuleProxy(types.ModuleType):
    """A repository module as the rules see it: attributes resolved from its syntax tree on use."""

    def __init__(self, module: StaticModule) -> None:
        super().__init__(module.name)
        self.__file__ = str(module.path)
        self._static = module

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        found = self._static.runtime_value(name)
        if found is None:
            raise AttributeError(name)
        return found


def bind_arguments(
    spec: ast.arguments, args: list[Any], kwargs: dict[str, Any], defaults: Env
) -> dict[str, Any]:
    """A function's parameter names bound to already evaluated arguments (defaults read in ``defaults``)."""
    params = [a.arg for a in [*spec.posonlyargs, *spec.args]]
    names: dict[str, Any] = {}
    for name, default in zip(params[len(params) - len(spec.defaults) :], spec.defaults, strict=True):
        names[name] = evaluate(default, defaults)
    for a, kw_default in zip(spec.kwonlyargs, spec.kw_defaults, strict=True):
        names[a.arg] = evaluate(kw_default, defaults) if kw_default is not None else Unresolved(a.arg)
    names.update(zip(params, args, strict=False))
    if spec.vararg is not None:
        names[spec.vararg.arg] = tuple(args[len(params) :])
    accepted = {*params, *(a.arg for a in spec.kwonlyargs)}
    names.update({k: v for k, v in kwargs.items() if k in accepted})
    if spec.kwarg is not None:
        names[spec.kwarg.arg] = {k: v for k, v in kwargs.items() if k not in accepted}
    for name in accepted:
        names.setdefault(name, Unresolved(name))
    return names
