"""``python -m airflow_crashsafe.drill``: the drill without the console script (CI, checkouts)."""

from __future__ import annotations

import argparse
import sys

from airflow_crashsafe.drill.cli import add_arguments, run


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_crashsafe.drill", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
