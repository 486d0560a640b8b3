"""Attempt fencing: a stale attempt can never overwrite a newer attempt's output.

- :mod:`.transaction`: ``fenced_transaction``, the public building block for your own writes;
- :mod:`.decision`: ``decide``, what a fenced SQL operator does (run, skip, adopt, wait);
- :mod:`.runners`: how each dialect runs the write once decided;
- :mod:`.events`: what is recorded in the crashsafe store on the way.
"""

from __future__ import annotations

from airflow_crashsafe.fencing.transaction import FencedTransaction, fenced_transaction

__all__ = ["FencedTransaction", "fenced_transaction"]
