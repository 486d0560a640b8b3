"""Idempotency keys (docs/design.md, "Idempotency key").

A key is a UUID derived from the slot and the target (and a version the user bumps to send again on
purpose), so it is the same across retries, scheduler resets, clears and backfills of the same date,
and different across dates, targets and map indexes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.identity import Slot, current_context, slot_from_context

__all__ = ["KEY_NAMESPACE", "derive_key", "idempotency_key"]

#: Fixed namespace of every key crashsafe derives; changing it would re-send every call.
KEY_NAMESPACE = uuid.UUID("6d1c3a52-6f0e-5b7a-9a43-63726173687f")


def derive_key(slot: Slot, target: str, version: int = 1) -> str:
    """The idempotency key of ``target`` in ``slot``: pure, so it can be recomputed anywhere."""
    if not target:
        raise ConfigurationError("An idempotency key needs a non-empty target (e.g. 'payouts').")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ConfigurationError(f"version must be a positive integer, got {version!r}.")
    name = json.dumps(
        [slot.dag_id, slot.task_id, slot.map_index, slot.partition, target, version],
        separators=(",", ":"),
    )
    return str(uuid.uuid5(KEY_NAMESPACE, name))


def idempotency_key(
    target: str,
    *,
    context: Mapping[str, Any] | None = None,
    version: int = 1,
    slot_partition: str | None = None,
) -> str:
    """The idempotency key of ``target`` for the running task (or ``context``), as a UUID string."""
    ctx = current_context(context)
    return derive_key(slot_from_context(ctx, slot_partition), target, version)
