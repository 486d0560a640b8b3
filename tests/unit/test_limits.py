"""Numeric options: nan, infinities and out-of-range numbers are refused by name, for every option."""

from __future__ import annotations

import math

import pytest

from airflow_crashsafe import config
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.limits import DAY, Limit
from airflow_crashsafe.options import LIMITS, OPTIONS

#: What Python's float() and TOML accept that is no usable number.
NOT_FINITE = ["nan", "NaN", "inf", "-inf", "Infinity", "1e309"]
NUMERIC = sorted(name for name, option in OPTIONS.items() if option["type"] in ("float", "integer"))


@pytest.mark.parametrize("value", [*NOT_FINITE, math.nan, math.inf, -math.inf])
def test_a_limit_refuses_what_is_not_a_finite_number(value: object) -> None:
    """nan passes every `<=` check; the limit refuses it, and every infinity, naming the option."""
    with pytest.raises(
        ConfigurationError, match=r"--threshold = .* is not a finite number: set it to a number"
    ):
        Limit(0, DAY, above=True).check(value, "--threshold")


def test_a_limit_keeps_its_bounds_and_whole_numbers() -> None:
    """The bounds themselves (but an excluded low), and integer limits take only whole numbers."""
    limit = Limit(0, 10, above=True)
    assert limit.check("10", "x") == 10.0
    assert limit.check(0.5, "x") == 0.5
    for outside in (0, -1, 10.5, 10**400):
        with pytest.raises(
            ConfigurationError, match="is out of range: set it to a number of seconds above 0"
        ):
            limit.check(outside, "x")
    whole = Limit(1, 5, integer=True, unit="days")
    assert whole.check_int("3", "n") == 3
    assert whole.check_int(4.0, "n") == 4
    with pytest.raises(
        ConfigurationError, match=r"2\.5 is not a whole number: set it to a whole number of days"
    ):
        whole.check(2.5, "n")
    with pytest.raises(ConfigurationError, match="True is not a number"):
        whole.check(True, "n")


def test_every_numeric_crashsafe_option_has_a_limit_its_default_and_example_meet() -> None:
    """options.LIMITS covers exactly the float and integer options, and their documented values fit."""
    assert sorted(LIMITS) == NUMERIC
    for name in NUMERIC:
        limit = LIMITS[name]
        assert limit.integer == (OPTIONS[name]["type"] == "integer"), name
        for documented in (OPTIONS[name]["default"], OPTIONS[name]["example"]):
            assert limit.admits(float(str(documented))), (name, documented)


@pytest.mark.parametrize("option", NUMERIC)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e309", "-1", "1e12"])
def test_every_numeric_crashsafe_option_refuses_a_value_out_of_its_range(
    option: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each [crashsafe] number set to nan, an infinity or far out of range is refused by its accessor,
    naming the option and the environment variable it came from, with its range and an example."""
    env = f"AIRFLOW__CRASHSAFE__{option.upper()}"
    monkeypatch.setenv(env, value)
    config.reset_cache()
    accessor = getattr(config, option)
    with pytest.raises(ConfigurationError) as err:
        accessor()
    message = str(err.value)
    assert message.startswith(f"[crashsafe] {option} = {value!r} is ")
    assert f"set {env} to a " in message
    assert f"e.g. {OPTIONS[option]['example']}" in message
    config.reset_cache()


@pytest.mark.parametrize("option", NUMERIC)
def test_every_numeric_crashsafe_option_reads_its_default(
    option: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unset, each numeric accessor returns its declared default (as a number of the declared type)."""
    monkeypatch.delenv(f"AIRFLOW__CRASHSAFE__{option.upper()}", raising=False)
    config.reset_cache()
    value = getattr(config, option)()
    assert value == float(str(OPTIONS[option]["default"]))
    assert isinstance(value, int) == (OPTIONS[option]["type"] == "integer")
    config.reset_cache()
