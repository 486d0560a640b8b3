"""The watchdog refuses a nan, infinite or out-of-range number, naming the flag or the file and table."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog import cli
from airflow_crashsafe.watchdog.settings import DEFAULTS, LIMITS

#: TOML's own literals, and what Python's float() accepts from a flag.
TOML_BAD = ["nan", "+inf", "-inf", "1e309", "-1", "1e12"]
FLAG_BAD = ["nan", "inf", "-inf", "1e309", "-1", "1e12"]
#: The [watch] numbers that are also flags (the deadline_* ones are [watch] only).
FLAGGED = sorted(key for key in LIMITS if not key.startswith("deadline_"))


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_every_numeric_watch_option_has_a_limit_its_default_meets() -> None:
    """Each number in DEFAULTS has a limit, and each default (where there is one) is inside it."""
    numeric = {k for k, v in DEFAULTS.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    assert numeric <= set(LIMITS)
    assert set(LIMITS) <= set(DEFAULTS)
    for key, limit in LIMITS.items():
        assert DEFAULTS[key] is None or limit.admits(float(DEFAULTS[key])), key


@pytest.mark.parametrize("key", sorted(LIMITS))
@pytest.mark.parametrize("value", TOML_BAD)
def test_every_watch_number_in_the_file_is_checked(tmp_path: Path, key: str, value: str) -> None:
    """`[watch] <number> = nan` (or an infinity, or out of range) names the file, the table and the option."""
    path = tmp_path / "watch.toml"
    path.write_text(f"[watch]\n{key} = {value}\n")
    with pytest.raises(ConfigurationError) as err:
        cli.settings(parse("--config", str(path)))
    assert str(err.value).startswith(f"{path}: [watch] {key} = ")
    assert ": set it to a " in str(err.value)


@pytest.mark.parametrize("key", FLAGGED)
@pytest.mark.parametrize("value", FLAG_BAD)
def test_every_numeric_flag_is_checked(key: str, value: str) -> None:
    """`--<number> nan` (float() takes it) is refused naming the flag; integer flags argparse refuses."""
    flag = "--" + key.replace("_", "-")
    if LIMITS[key].integer and value in ("nan", "inf", "-inf", "1e309", "1e12"):
        with pytest.raises(SystemExit):  # type=int: argparse says "invalid int value"
            parse(f"{flag}={value}")
        return
    with pytest.raises(ConfigurationError) as err:
        cli.settings(parse(f"{flag}={value}"))
    assert str(err.value).startswith(f"{flag} = ")


def test_a_flag_is_checked_over_a_good_file_and_names_the_flag(tmp_path: Path) -> None:
    """The flag wins over the file, so a bad flag is named even when the file's value is fine."""
    path = tmp_path / "watch.toml"
    path.write_text("[watch]\nthreshold = 30\ngrace = 5\n")
    with pytest.raises(ConfigurationError, match=r"^--threshold = inf is not a finite number"):
        cli.settings(parse("--config", str(path), "--threshold", "inf"))
    merged, _ = cli.settings(parse("--config", str(path), "--grace", "0"))
    assert (merged["threshold"], merged["grace"]) == (30.0, 0.0)


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ("[watch]\ngrace = nan\n", "[watch] grace = nan is not a finite number"),
        ("[watch]\nthreshold = inf\n", "[watch] threshold = inf is not a finite number"),
        ("[watch]\ninterval = nan\n", "[watch] interval = nan is not a finite number"),
        (
            '[[sinks]]\ntype = "slack"\nurl = "https://hooks.example/x"\ntimeout = nan\n',
            "sink #1: timeout = nan is not",
        ),
        ('[[deadlines]]\ndag_id = "d"\ncron = "0 0 * * *"\noffset = inf\n', "'offset' = inf is not a finite"),
    ],
    ids=["grace", "threshold", "interval", "sink_timeout", "deadline_offset"],
)
def test_watch_exits_2_on_a_number_that_would_silence_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, needle: str
) -> None:
    """`grace = nan` (nothing ever pages), `threshold = inf` (a dead scheduler alive forever),
    `interval = nan` (a spinning loop) and their kin stop `watch` with exit 2, naming the file."""
    path = tmp_path / "watch.toml"
    path.write_text(config)
    args = parse("--config", str(path), "--state-dir", str(tmp_path), "--once")
    assert cli.run(args) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert f"{path}: " in err
