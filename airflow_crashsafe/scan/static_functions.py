"""Static functions: a function object compiled from its ``def`` alone, so making it runs nothing.

The ``def`` is compiled without its decorators, default values and annotations, and the function's
code object is taken from the compiled module's constants: no statement of the user's file is
executed, not even the ``def`` itself. The rules read the function's source from its file, as
they read any function's (:mod:`.python_code`).
"""

from __future__ import annotations

import ast
import types
from typing import Any

__all__ = ["compile_function"]


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
