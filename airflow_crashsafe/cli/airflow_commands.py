"""``airflow crashsafe ...``: the ``airflow-crashsafe`` commands inside Airflow's own CLI.

Airflow 3.2+ reads provider CLI commands from the ``cli`` entry of the provider info (see
:mod:`airflow_crashsafe.provider_info`) and calls :func:`get_cli_commands` each time ``airflow``
builds its parser. Every subcommand of ``airflow-crashsafe`` becomes ``airflow crashsafe <name>``
and hands the rest of the line, unparsed, to :func:`airflow_crashsafe.cli.main.main`: one parser
defines the options, so the two spellings cannot drift. The standalone ``airflow-crashsafe``
stays, for hosts and scripts that run no ``airflow`` (the watchdog's, above all).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["GROUP", "get_cli_commands", "subcommands"]

#: The group name: ``airflow crashsafe ...``.
GROUP = "crashsafe"


def subcommands() -> list[tuple[str, str]]:
    """``(name, help)`` of each ``airflow-crashsafe`` subcommand, in ``--help`` order."""
    from airflow_crashsafe.cli.main import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return [(choice.dest, choice.help or "") for choice in action._choices_actions]
    return []


def _runner(name: str) -> Callable[[argparse.Namespace], None]:
    def run(args: argparse.Namespace) -> None:
        from airflow_crashsafe.cli.main import main

        rest = list(args.crashsafe_args)
        if rest[:1] == ["--"]:  # `airflow crashsafe watch -- --help`: argparse keeps the separator
            rest = rest[1:]
        code = main([name, *rest])
        if code:
            sys.exit(code)  # Airflow ignores a command's return value

    run.__name__ = f"crashsafe_{name}"
    return run


def get_cli_commands() -> list[Any]:
    """Airflow's ``GroupCommand`` ``crashsafe`` with one ``ActionCommand`` per subcommand."""
    from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand

    rest = Arg(
        ("crashsafe_args",),
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="the arguments of `airflow-crashsafe <command>` (see `airflow crashsafe <command> -- --help`)",
    )
    return [
        GroupCommand(
            name=GROUP,
            help="airflow-crashsafe: the crashsafe store, ledger, audit, watchdog and doctor",
            description="The same commands as the standalone `airflow-crashsafe` console script.",
            subcommands=[
                ActionCommand(
                    name=name,
                    help=help_text,
                    func=_runner(name),
                    args=(rest,),
                    description=f"{help_text}. Same as `airflow-crashsafe {name} ARGS`.",
                )
                for name, help_text in subcommands()
            ],
        )
    ]
