"""SQL helpers for crashsafe's fenced operators: quoting, catalog introspection, checks, statements.

Only user-named identifiers pass through here, always quoted by the driver's own rules; values
are always bound as parameters.
"""

from __future__ import annotations
