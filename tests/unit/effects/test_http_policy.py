"""Whether a retry may re-send after an unknown outcome: declared by the user, never assumed."""

from __future__ import annotations

import pytest

from airflow_crashsafe.effects.http_policy import unknown_outcome_policy
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.operators.http import IdempotentHttpOperator


@pytest.mark.parametrize(
    ("explicit", "declared", "connection", "policy"),
    [
        (None, None, None, "fail"),  # nobody said: never re-send
        (None, True, None, "resend"),
        (None, False, None, "fail"),
        (None, None, True, "resend"),
        (None, None, "true", "resend"),  # a connection URI's extra is text
        (None, None, "false", "fail"),
        (None, False, "true", "fail"),  # the operator's argument wins over the connection
        (None, True, "false", "resend"),
        ("fail", True, None, "fail"),  # explicit wins
        ("resend", None, None, "resend"),
        ("resend", True, None, "resend"),
    ],
)
def test_policy_matrix(explicit: str | None, declared: bool | None, connection: object, policy: str) -> None:
    """Explicit choice, else the operator's declaration, else the connection's, else fail."""
    assert unknown_outcome_policy("t", explicit=explicit, declared=declared, connection=connection) == policy


@pytest.mark.parametrize(("declared", "connection"), [(False, None), (None, False), (None, "no")])
def test_resend_to_a_target_declared_naive_is_a_configuration_error(
    declared: bool | None, connection: object
) -> None:
    """on_unknown_outcome='resend' with a target declared not to honour keys is refused, saying why."""
    with pytest.raises(ConfigurationError, match="contradicts"):
        unknown_outcome_policy("t", explicit="resend", declared=declared, connection=connection)


def test_bad_values_are_configuration_errors() -> None:
    """A typo in the policy or in the connection's extra is named, not guessed."""
    with pytest.raises(ConfigurationError, match="on_unknown_outcome"):
        unknown_outcome_policy("t", explicit="retry", declared=None, connection=None)
    with pytest.raises(ConfigurationError, match="crashsafe_honours_idempotency_keys"):
        unknown_outcome_policy("t", explicit=None, declared=None, connection="maybe")


def test_the_operator_refuses_a_contradiction_when_the_dag_is_parsed() -> None:
    """IdempotentHttpOperator(target_honours_keys=False, on_unknown_outcome='resend') fails at parse."""
    with pytest.raises(ConfigurationError, match="contradicts target_honours_keys=False"):
        IdempotentHttpOperator(
            task_id="pay",
            http_conn_id="v",
            endpoint="/p",
            target_honours_keys=False,
            on_unknown_outcome="resend",
        )
    default = IdempotentHttpOperator(task_id="pay", http_conn_id="v", endpoint="/p")
    assert default.on_unknown_outcome is None
    assert default.target_honours_keys is None


def test_rendered_secrets_are_registered_before_airflow_stores_the_rendered_fields() -> None:
    """A templated endpoint's api_key is known to Airflow's masker as soon as the fields are rendered."""
    from airflow.sdk._shared.secrets_masker import redact, reset_secrets_masker

    reset_secrets_masker()
    try:
        operator = IdempotentHttpOperator(
            task_id="pay",
            http_conn_id="v",
            endpoint="/pay?api_key={{ params.key }}&day={{ ds }}",
            data="grant_type=x&client_secret={{ params.key }}",
            params={"key": "rendered-s3cret"},
        )
        operator.render_template_fields({"ds": "2026-11-29", "params": {"key": "rendered-s3cret"}})
        assert operator.endpoint == "/pay?api_key=rendered-s3cret&day=2026-11-29"
        assert "rendered-s3cret" not in str(redact(operator.endpoint, "endpoint"))
        assert "rendered-s3cret" not in str(redact(operator.data, "data"))
        assert "2026-11-29" in str(redact(operator.endpoint, "endpoint"))  # not a secret: kept
    finally:
        reset_secrets_masker()
