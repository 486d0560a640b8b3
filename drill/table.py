"""Plain-text tables for the report: columns padded to their widest cell."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["align"]


def align(rows: Sequence[Sequence[str]], indent: str) -> list[str]:
    """One line per row, columns two spaces apart and left-aligned, no trailing blanks."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
