"""Database URLs and libpq strings shown to people never carry a password, in any form libpq takes."""

from __future__ import annotations

import pytest

from airflow_crashsafe.dsn import dsn_secrets, mask_dsn_text, safe_db_url
from airflow_crashsafe.redaction import DEFAULT_POLICY

SECRET = "Hunter2Secret"

#: Every way libpq (and SQLAlchemy's spelling of it) takes a password, with what must stay visible.
FORMS = [
    (f"postgresql://airflow:{SECRET}@db.internal:5432/airflow", "db.internal:5432/airflow"),
    (f"postgres://airflow:{SECRET}@db.internal/airflow", "postgres://airflow:***@db.internal"),
    (f"postgresql+psycopg2://airflow:{SECRET}@db.internal/airflow", "postgresql+psycopg2://"),
    ("postgresql://airflow:Hunter2%40Secret%2F@db.internal/airflow", "db.internal/airflow"),
    (f"postgresql://:{SECRET}@db.internal/airflow", "db.internal/airflow"),
    (f"postgresql://airflow@db.internal/airflow?password={SECRET}", "?password=***"),
    (
        f"postgresql://airflow@db.internal/airflow?sslmode=require&password={SECRET}",
        "sslmode=require&password",
    ),
    (f"postgresql://airflow@db.internal/airflow?pass%77ord={SECRET}&sslmode=require", "&sslmode=require"),
    (
        f"postgresql://airflow@db.internal/airflow?sslpassword={SECRET}&passfile=/etc/pg/.pgpass",
        "/etc/pg/.pgpass",
    ),
    (f"host=db.internal port=5432 user=airflow password={SECRET} dbname=airflow", "dbname=airflow"),
    (f"host=db.internal password = '{SECRET} with spaces' dbname=airflow", "dbname=airflow"),
    (f"host=db.internal password='it\\'s {SECRET}' dbname=airflow", "dbname=airflow"),
    (f"host=db.internal password={SECRET} tail dbname=airflow", "dbname=airflow"),
    (f"host=db.internal sslpassword={SECRET} passfile=/etc/pg/.pgpass", "passfile=/etc/pg/.pgpass"),
]


def _leaks(text: str) -> list[str]:
    """Every piece of the secret (or its encodings) still in ``text``."""
    pieces = [SECRET, "Hunter2", "Hunter2@Secret", "Hunter2%40Secret", "with spaces", "tail"]
    return [piece for piece in pieces if piece in text]


@pytest.mark.parametrize(("dsn", "kept"), FORMS)
def test_every_form_of_a_password_is_masked_and_the_rest_kept(dsn: str, kept: str) -> None:
    """safe_db_url hides the password in each URL and keyword/value form; host, db, passfile stay."""
    shown = safe_db_url(dsn)
    assert _leaks(shown) == []
    assert kept in shown
    assert "***" in shown


#: A bare ``password=a b`` (which libpq rejects) is masked whole only where the DSN is known.
BARE_TAIL = next(dsn for dsn, _ in FORMS if " tail " in dsn)


@pytest.mark.parametrize(("dsn", "kept"), FORMS)
def test_free_text_quoting_a_dsn_is_masked_by_shape_and_by_its_known_secrets(dsn: str, kept: str) -> None:
    """An error quoting the DSN, and its password alone (as written, decoded or unquoted) elsewhere
    in it, are masked when the DSN is known; by shape alone when it is not."""
    for secret in dsn_secrets(dsn):
        text = f"cannot read the job table at {dsn}: the password {secret} was refused"
        assert _leaks(mask_dsn_text(text, dsn)) == [], secret
    if dsn != BARE_TAIL:
        assert _leaks(mask_dsn_text(f"watching {dsn} every 10 s")) == []
        assert _leaks(DEFAULT_POLICY.text(f"store error at {dsn}")) == []  # redaction's free text


@pytest.mark.parametrize(
    "dsn",
    [
        f"host=127.0.0.1 port=1 password={SECRET} Zq7Tail",
        f"postgresql://airflow:{SECRET}%zz@127.0.0.1:1/airflow",
        f"postgresql://airflow@127.0.0.1:1/airflow?password={SECRET}%00",
        f"postgresql://airflow:{SECRET}@[::1:1/airflow",
        f"postgresql://airflow:{SECRET}@[]/airflow",
    ],
)
def test_psycopgs_own_parse_errors_are_masked(dsn: str) -> None:
    """libpq quotes the piece of the string it could not parse (`missing "=" after "Zq7Tail"`,
    `invalid percent-encoded token: "…"`, a whole malformed URI): the masked error keeps none of it,
    with the DSN known or by the shape of libpq's message alone."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    with pytest.raises(psycopg.ProgrammingError) as raised:  # the string does not parse
        conninfo_to_dict(dsn)
    error = str(raised.value)
    pieces = (SECRET, "Zq7Tail")
    assert any(piece in error for piece in pieces), f"libpq no longer quotes the string: {error}"
    for masked in (mask_dsn_text(error, dsn), mask_dsn_text(error), DEFAULT_POLICY.text(error)):
        assert not any(piece in masked for piece in pieces), masked


def test_text_without_a_password_is_left_alone() -> None:
    """Hosts, ports, paths and other keywords are not mistaken for passwords."""
    for text in (
        "postgresql://airflow@db.internal:5432/airflow?sslmode=require",
        "host=db.internal port=5432 dbname=airflow passfile=/etc/pg/.pgpass",
        'connection failed: FATAL:  password authentication failed for user "airflow"',
        "sqlite:////var/lib/airflow/airflow.db",
    ):
        assert safe_db_url(text) == text
        assert mask_dsn_text(text) == text
