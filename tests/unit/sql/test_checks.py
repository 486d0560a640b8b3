"""The natural-key refusals, over catalog facts given directly."""

from __future__ import annotations

import pytest

from airflow_crashsafe.errors import (
    ConfigurationError,
    DuplicateSourceKeysError,
    GeneratedKeyError,
    NaturalKeyNotUniqueError,
    NondeterministicSourceError,
)
from airflow_crashsafe.sql import checks
from airflow_crashsafe.sql.introspect import Column, TableInfo, UniqueKey
from airflow_crashsafe.sql.quoting import Quoter, parse_table_name

Q = Quoter("postgresql")


def _info(*keys: UniqueKey, generated: str | None = None) -> TableInfo:
    cols = (Column("id", "integer", generated), Column("day", "date"), Column("amount", "integer"))
    return TableInfo(parse_table_name("mart.revenue"), cols, keys)


def test_exact_plain_unique_key_passes() -> None:
    """A plain unique index on exactly the key columns (any order) is accepted."""
    checks.check_natural_key(_info(UniqueKey("k", ("day", "id"))), ["id", "day"], Q)


def test_superset_or_subset_index_is_refused_with_the_ddl_to_add() -> None:
    """An index on more or fewer columns is not the key; the message names the CREATE UNIQUE INDEX."""
    info = _info(UniqueKey("pk", ("id",), primary=True), UniqueKey("k3", ("id", "day", "amount")))
    with pytest.raises(NaturalKeyNotUniqueError) as err:
        checks.check_natural_key(info, ["day", "amount"], Q)
    assert 'CREATE UNIQUE INDEX "revenue_natural_key" ON "mart"."revenue" ("day", "amount");' in str(
        err.value
    )
    assert "pk ['id']" in str(err.value)


def test_generated_key_is_refused_before_uniqueness() -> None:
    """A generated key column is refused as a surrogate key even when it is the primary key."""
    info = _info(UniqueKey("pk", ("id",), primary=True), generated="default nextval('s') (calls nextval())")
    with pytest.raises(GeneratedKeyError, match="'id' is default nextval"):
        checks.check_natural_key(info, ["id"], Q)


def test_unknown_key_column_is_a_configuration_error() -> None:
    """A key column the table lacks is named together with the table's columns."""
    with pytest.raises(ConfigurationError, match=r"\['nope'\] are not columns of mart.revenue"):
        checks.check_natural_key(_info(), ["nope"], Q)


def test_source_key_problems() -> None:
    """NULL keys and duplicates are refused; duplicates are shown with their counts."""
    checks.check_source_keys(["id"], 0, [], 0)
    with pytest.raises(DuplicateSourceKeysError, match="2 row"):
        checks.check_source_keys(["id"], 2, [], 0)
    with pytest.raises(DuplicateSourceKeysError, match=r"7 natural key.*\{'id': 1, 'day': 'd'\} x3"):
        checks.check_source_keys(["id", "day"], 0, [(1, "d", 3)], 7)


def test_nondeterministic_source_names_the_call_and_the_flag() -> None:
    """The refusal names the function and allow_nondeterministic; allowed=True lets it pass."""
    with pytest.raises(NondeterministicSourceError, match=r"random\(\).*allow_nondeterministic=True"):
        checks.check_deterministic("SELECT random()", allowed=False, operator="t")
    checks.check_deterministic("SELECT random()", allowed=True, operator="t")
