"""What the names in one function body stand for, read without running it, and never in a loop.

A function body rebinds names (``df = df.rename(...)``, ``sql = sql + " WHERE ..."``), so a name
keeps every value bound to it in order. Reading a name while one of its own values is being read
gives the value bound before it: ``df`` inside ``df.rename(...)`` is the earlier ``df``. Each read
either enters a new name or goes back to an earlier value of one already being read, so it ends;
a budget of reads per function body bounds the rest (code that builds a name from itself many
times over), after which a name is simply not known, which every caller treats as "not known".

Keys are names (``sql``) or dotted targets (``self.sql``, ``job_config.write_disposition``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Bindings", "target_key"]

#: Reads of bound values one function body may make (each read is a step into a value).
BUDGET = 4000


def target_key(node: ast.AST) -> str | None:
    """``x`` for a name, ``self.sql`` for an attribute chain of names; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = target_key(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class Bindings:
    """The values bound to each key of one function body, in the order the code binds them."""

    def __init__(self, budget: int = BUDGET) -> None:
        self._values: dict[str, list[ast.expr]] = {}
        self._reading: dict[str, int] = {}
        self.budget = budget

    def bind(self, key: str, value: ast.expr) -> None:
        self._values.setdefault(key, []).append(value)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def keys(self) -> list[str]:
        return list(self._values)

    @contextmanager
    def read(self, key: str) -> Iterator[ast.expr | None]:
        """The value ``key`` holds here (None: unbound, or only bound by what is being read)."""
        values = self._values.get(key)
        index = self._reading.get(key, len(values or ())) - 1
        if not values or index < 0 or self.budget <= 0:
            yield None
            return
        self.budget -= 1
        before = self._reading.get(key)
        self._reading[key] = index
        try:
            yield values[index]
        finally:
            if before is None:
                del self._reading[key]
            else:
                self._reading[key] = before
