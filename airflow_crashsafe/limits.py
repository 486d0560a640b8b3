"""What a numeric option may be, checked once where the option is read.

Python's ``float()`` takes ``"nan"``, ``"inf"`` and ``"1e309"``, TOML has ``nan`` and ``inf``
literals, and every comparison with nan is false, so a check such as ``value <= 0`` lets nan
through: a nan grace never pages, an infinite threshold keeps a dead scheduler alive forever, a
nan interval spins the poll loop, and a huge one overflows a ``timedelta``. Every numeric option
(``[crashsafe]``, the watchdog's flags and ``[watch]``, ``[[sinks]]``, ``[[deadlines]]``) declares
a :class:`Limit` beside its default and is read through :meth:`Limit.check`, which refuses anything
but a finite number in range with the option's name, where it came from and what to write.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass

from airflow_crashsafe.errors import ConfigurationError

__all__ = ["DAY", "HOUR", "YEAR", "Limit"]

HOUR = 3600.0
DAY = 24 * HOUR
YEAR = 365 * DAY


@dataclass(frozen=True)
class Limit:
    """A finite number from ``low`` (excluded when ``above``) to ``high``, whole when ``integer``."""

    low: float
    high: float
    above: bool = False
    integer: bool = False
    unit: str = "seconds"

    def describe(self) -> str:
        """The range in words, for error messages and docs: "a number of seconds above 0 and at most 3600"."""
        kind = "a whole number" if self.integer else "a number"
        unit = f" of {self.unit}" if self.unit else ""
        low = f"above {_number(self.low)}" if self.above else f"from {_number(self.low)}"
        return f"{kind}{unit} {low} {'and at most' if self.above else 'to'} {_number(self.high)}"

    def admits(self, value: float) -> bool:
        """Whether ``value`` is finite, in range and (for an integer limit) whole."""
        if not math.isfinite(value) or value > self.high:
            return False
        if value < self.low or (self.above and value == self.low):
            return False
        return not self.integer or float(value).is_integer()

    def check(self, value: object, name: str, *, example: object = None, set_it: str = "it") -> float:
        """``value`` (a number, or text that reads as one) as a float, or a ConfigurationError.

        ``name`` says which option and where it came from (``--threshold``, ``/etc/watch.toml:
        [watch] grace``, ``[crashsafe] recovery_wait_seconds``); ``example`` is a good value;
        ``set_it`` how to change it (``AIRFLOW__CRASHSAFE__RECOVERY_WAIT_SECONDS``).
        """
        number: float | None = None
        if isinstance(value, float):
            number = value
        elif isinstance(value, int) and not isinstance(value, bool):
            number = float(max(-(10**300), min(value, 10**300)))  # a huge int is out of range
        elif isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                number = None
        if number is not None and self.admits(number):
            return number
        if number is None:
            problem = "is not a number"
        elif not math.isfinite(number):
            problem = "is not a finite number"
        elif self.integer and not number.is_integer() and self.low <= number <= self.high:
            problem = "is not a whole number"
        else:
            problem = "is out of range"
        if isinstance(example, float):
            example = _number(example)
        hint = "" if example is None else f", e.g. {example}"
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "…"
        head = f"{name} = {shown}" if name else shown
        raise ConfigurationError(f"{head} {problem}: set {set_it} to {self.describe()}{hint}")

    def check_int(self, value: object, name: str, *, example: object = None, set_it: str = "it") -> int:
        """:meth:`check` for a whole-number option, as an int."""
        return int(self.check(value, name, example=example, set_it=set_it))

    def argument(self, *, example: object = None) -> Callable[[str], float]:
        """An argparse ``type=`` for a flag with this limit (argparse names the flag)."""

        def parse(text: str) -> float:
            try:
                number = self.check(text, "", example=example)
            except ConfigurationError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
            return int(number) if self.integer else number

        return parse


def _number(value: float) -> str:
    """``30`` rather than ``30.0``, ``31536000`` rather than ``3.1536e+07``."""
    return str(int(value)) if float(value).is_integer() else repr(value)
