"""A test auth manager: SimpleAuthManager plus per-user DAG access, which SimpleAuthManager lacks.

SimpleAuthManager lets every viewer read every DAG (only multi-team mode narrows it), so "user A
sees only A's DAGs" needs a manager that filters per DAG, as FAB or Keycloak do in production.
``CRASHSAFE_TEST_DAG_ACL`` maps a user name to the DAG id prefixes they may read (JSON); admins
and users not listed keep SimpleAuthManager's answer. ``CRASHSAFE_TEST_ENTITY_DENY`` maps a user
name to the DAG access entities (``TASK_INSTANCE``, ``XCOM``...) they may not read although they
may read the DAG, as FAB's per-resource permissions allow. Configured with ``[core] auth_manager``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

__all__ = ["AclAuthManager"]


class AclAuthManager(SimpleAuthManager):
    """SimpleAuthManager whose ``is_authorized_dag`` also checks the user's DAG id prefixes."""

    def is_authorized_dag(
        self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None
    ) -> bool:
        if not super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        ):
            return False
        denied = json.loads(os.environ.get("CRASHSAFE_TEST_ENTITY_DENY", "{}")).get(user.username, [])
        if access_entity is not None and access_entity.name in denied:
            return False
        acl = json.loads(os.environ.get("CRASHSAFE_TEST_DAG_ACL", "{}"))
        prefixes = acl.get(user.username)
        if prefixes is None or details is None or details.id is None:
            return True
        return any(str(details.id).startswith(p) for p in prefixes)
