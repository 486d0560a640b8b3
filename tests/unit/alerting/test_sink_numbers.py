"""A sink's numbers: nan, infinite or out-of-range timeouts, deadlines, retries and ports are refused."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from airflow_crashsafe.alerting import WebhookSink, build_sinks, load_config_file
from airflow_crashsafe.errors import ConfigurationError

SINK = '[[sinks]]\ntype = "webhook"\nname = "pager"\nurl = "https://hooks.example/h"\n'
EMAIL = '[[sinks]]\ntype = "email"\nhost = "smtp.example"\nfrom = "w@example"\nto = "ops@example"\n'


@pytest.mark.parametrize("field", ["timeout", "deadline", "retries"])
@pytest.mark.parametrize("value", ["nan", "+inf", "-inf", "1e309", "-1", "1e9"])
def test_a_sink_number_from_a_file_names_the_file_entry_and_field(
    tmp_path: Path, field: str, value: str
) -> None:
    """`timeout = nan` would never time out, `retries = 1e9` never stop: refused, named in full."""
    path = tmp_path / "alerting.toml"
    path.write_text(f"{SINK}{field} = {value}\n")
    with pytest.raises(ConfigurationError) as err:
        build_sinks(load_config_file(path)["sinks"], source=path)
    assert str(err.value).startswith(f"{path}: [[sinks]]: sink #1 ('pager'): {field} = ")
    assert ": set it to a " in str(err.value)


@pytest.mark.parametrize("port", ["nan", "inf", "70000", "0", "25.5"])
def test_an_email_port_out_of_range_is_refused(tmp_path: Path, port: str) -> None:
    """An SMTP port must be a whole number from 1 to 65535 (int(inf) used to crash the watchdog)."""
    path = tmp_path / "alerting.toml"
    path.write_text(f"{EMAIL}port = {port}\n")
    with pytest.raises(
        ConfigurationError, match=r"sink #1: port = .*: set it to a whole number from 1 to 65535"
    ):
        build_sinks(load_config_file(path)["sinks"], source=path)


def test_a_sink_built_in_code_is_checked_the_same_way() -> None:
    """The constructor is the one place a sink's numbers are checked: code gets the same refusal."""
    with pytest.raises(ConfigurationError, match=r"^sink 'webhook': timeout = nan is not a finite number"):
        WebhookSink("https://hooks.example/h", timeout=math.nan)
    with pytest.raises(ConfigurationError, match=r"^sink 'hook': deadline = inf is not a finite number"):
        WebhookSink("https://hooks.example/h", name="hook", deadline=math.inf)
    sink = WebhookSink("https://hooks.example/h", timeout=3, deadline=3600, retries=0)
    assert (sink.timeout, sink.deadline, sink.retries) == (3.0, 3600.0, 0)
