"""``python -m drill`` (what ``./dev drill`` runs): the crash drill from a checkout."""

from __future__ import annotations

import sys

from drill.cli import main

if __name__ == "__main__":
    sys.exit(main())
