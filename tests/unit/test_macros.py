"""The plugin's template macros, through Airflow's own plugin integration."""

from __future__ import annotations

import jinja2

from airflow_crashsafe.effects.keys import idempotency_key
from airflow_crashsafe.testing import fake_context


def test_idempotency_key_macro_is_registered_and_renders() -> None:
    """Airflow exposes macros.crashsafe.idempotency_key, and it renders the task's key."""
    from airflow.sdk import plugins_manager
    from airflow.sdk.execution_time import macros

    plugins_manager.integrate_macros_plugins()
    context = fake_context(task_id="push")
    rendered = (
        jinja2.Environment()
        .from_string(
            "{{ macros.crashsafe.idempotency_key('payouts') }}|"
            "{{ macros.crashsafe.idempotency_key('payouts', 2) }}"
        )
        .render(macros=macros, **context)
    )
    assert rendered.split("|") == [
        idempotency_key("payouts", context=context),
        idempotency_key("payouts", context=context, version=2),
    ]
