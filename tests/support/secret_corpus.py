"""Secret shapes real APIs use, each made fresh so that a test can search for it everywhere.

Every value is random (from a seeded generator, so a failure reproduces) in the format its vendor
documents: a token prefix, its alphabet and length, the connection string or URL it sits in. A
:class:`Shape` is the secret (what must never be shown) and the text it usually travels in (a
header line, a connection string, a sentence of an error message).
"""

from __future__ import annotations

import base64
import random
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote, quote_plus

__all__ = ["Shape", "Tokens", "encoded_forms", "text_shapes"]

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
UPPER = string.ascii_uppercase + string.digits
DIGITS = string.digits
LOWER = string.ascii_lowercase + string.digits


@dataclass(frozen=True)
class Shape:
    """One secret in its usual surroundings: ``secret`` must not survive redaction of ``text``."""

    name: str
    secret: str
    text: str


class Tokens:
    """Random credentials in vendors' formats; every call gives a new one."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def chars(self, alphabet: str, length: int) -> str:
        body = [self.rng.choice(alphabet) for _ in range(length)]
        digits, letters = [c for c in alphabet if c.isdigit()], [c for c in alphabet if c.isalpha()]
        if digits and letters and length >= 2:  # a real token this long almost surely has both
            body[:2] = [self.rng.choice(digits), self.rng.choice(letters)]
            self.rng.shuffle(body)
        return "".join(body)

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def b64(self, raw_length: int) -> str:
        return base64.b64encode(self.rng.randbytes(raw_length)).decode()

    def password(self) -> str:
        """A password with the punctuation real ones have (but no quote, space or ``;``)."""
        return self.chars(ALNUM, 10) + self.rng.choice("!@#$%^*,.") + self.chars(ALNUM, 5)

    def jwt(self) -> str:
        header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
        claims = f'{{"sub":"{self.chars(ALNUM, 12)}","iat":1700000000}}'.encode()
        return f"{header}.{base64.urlsafe_b64encode(claims).decode().rstrip('=')}.{self.chars(URLSAFE, 43)}"

    def pem(self, label: str) -> tuple[str, str]:
        body = "\n".join(self.b64(48) for _ in range(4))
        return body.splitlines()[1], f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


def basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


#: Token formats, each quoted bare in an error text.
_FORMATS: list[tuple[str, Callable[[Tokens], str]]] = [
    ("github_pat_classic", lambda t: f"ghp_{t.chars(ALNUM, 36)}"),
    ("github_pat_fine_grained", lambda t: f"github_pat_{t.chars(ALNUM, 22)}_{t.chars(ALNUM, 59)}"),
    ("gitlab_pat", lambda t: f"glpat-{t.chars(URLSAFE, 20)}"),
    ("slack_bot_token", lambda t: f"xoxb-{t.chars(DIGITS, 12)}-{t.chars(DIGITS, 13)}-{t.chars(ALNUM, 24)}"),
    ("stripe_live_key", lambda t: f"sk_live_{t.chars(ALNUM, 99)}"),
    ("stripe_webhook_secret", lambda t: f"whsec_{t.chars(ALNUM, 32)}"),
    ("google_api_key", lambda t: f"AIza{t.chars(URLSAFE, 35)}"),
    ("google_oauth_token", lambda t: f"ya29.{t.chars(URLSAFE, 120)}"),
    ("sendgrid_key", lambda t: f"SG.{t.chars(URLSAFE, 22)}.{t.chars(URLSAFE, 43)}"),
    ("twilio_api_key", lambda t: f"SK{t.chars(HEX, 32)}"),
    ("npm_token", lambda t: f"npm_{t.chars(ALNUM, 36)}"),
    ("pypi_token", lambda t: f"pypi-AgEIcHlwaS5vcmc{t.chars(URLSAFE, 60)}"),
    ("openai_key", lambda t: f"sk-proj-{t.chars(URLSAFE, 48)}"),
    ("anthropic_key", lambda t: f"sk-ant-api03-{t.chars(URLSAFE, 93)}"),
    ("databricks_token", lambda t: f"dapi{t.chars(HEX, 32)}"),
    ("huggingface_token", lambda t: f"hf_{t.chars(ALNUM, 34)}"),
    ("shopify_token", lambda t: f"shpat_{t.chars(HEX, 32)}"),
    ("mailgun_key", lambda t: f"key-{t.chars(HEX, 32)}"),
    ("vault_token", lambda t: f"hvs.{t.chars(URLSAFE, 90)}"),
    ("doppler_token", lambda t: f"dp.pt.{t.chars(ALNUM, 43)}"),
    ("docker_hub_token", lambda t: f"dckr_pat_{t.chars(URLSAFE, 27)}"),
    ("new_relic_key", lambda t: f"NRAK-{t.chars(UPPER, 27)}"),
    ("telegram_bot_token", lambda t: f"{t.chars(DIGITS, 10)}:AA{t.chars(URLSAFE, 33)}"),
]
#: Secrets in the text they travel in; ``{s}`` is the secret, ``{q}`` it URL-encoded, ``{b}`` the
#: Basic credential of ``etl:{s}``, and ``{u}``, ``{d}``, ``{x}`` a UUID, 18 digits, 32 hex digits.
_IN_TEXT: list[tuple[str, str, str]] = [
    ("slack_webhook", "alnum24", "POST https://hooks.slack.com/services/T0AB12CD3/B0AB12CD34E/{s} -> 404"),
    ("discord_webhook", "urlsafe68", "https://discord.com/api/webhooks/{d}/{s}"),
    ("teams_webhook", "hex32", "https://acme.webhook.office.com/webhookb2/{u}@{u}/IncomingWebhook/{s}/{u}"),
    ("telegram_bot_url", "telegram", "GET https://api.telegram.org/bot{s}/getMe"),
    ("zapier_hook", "lower7", "https://hooks.zapier.com/hooks/catch/{d}/{s}/"),
    (
        "azure_storage_connection_string",
        "b64_64",
        "AccountName=acme;AccountKey={s};EndpointSuffix=core.windows.net",
    ),
    (
        "azure_service_bus",
        "b64_32",
        "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={s}",
    ),
    ("azure_sas_url", "b64_32", "https://acme.blob.core.windows.net/c/x.csv?sv=2022-11-02&sr=b&sp=r&sig={q}"),
    (
        "azure_sas_token",
        "b64_32",
        "SharedAccessSignature sr=acme.servicebus.windows.net&sig={q}&se=1700000000",
    ),
    (
        "sql_server_connection_string",
        "password",
        "Server=tcp:db,1433;Database=dw;User ID=etl;Password={s};Encrypt=True",
    ),
    ("sql_server_password_with_space", "alnum6", "Data Source=db;User Id=etl;Password=correct horse {s};"),
    ("odbc_pwd", "password", "Driver={{ODBC Driver 18}};Server=db;Uid=etl;Pwd={s};"),
    ("snowflake_url", "password", "snowflake://etl:{q}@acme-xy12345/dw/public?warehouse=etl_wh"),
    (
        "snowflake_connection_string",
        "password",
        "account=acme-xy12345;user=etl;password={s};warehouse=etl_wh",
    ),
    (
        "databricks_jdbc",
        "dapi",
        "jdbc:databricks://acme.cloud.databricks.com:443/default;AuthMech=3;UID=token;PWD={s}",
    ),
    ("postgres_url", "password", "could not connect to postgresql://etl:{q}@db.acme.net:5432/dw"),
    ("basic_auth_url", "password", "GET https://etl:{q}@api.acme.com/v1/export failed"),
    ("authorization_basic", "alnum14", "Authorization: Basic {b}"),
    ("basic_in_prose", "alnum3", "proxy rejected Basic {b} for svc"),
    ("bearer_in_prose", "urlsafe40", "upstream said Bearer {s} has expired"),
    ("authorization_token", "hex40", "Authorization: Token {s}"),
    (
        "digest_response",
        "hex32",
        'Authorization: Digest username="etl", realm="api", nonce="{x}", response="{s}"',
    ),
    ("datadog_api_key", "hex32", "DD-API-KEY: {s}"),
    ("azure_functions_key", "urlsafe40", "x-functions-key: {s}"),
    ("apim_subscription_key", "hex32", "Ocp-Apim-Subscription-Key: {s}"),
    ("set_cookie", "urlsafe40", "Set-Cookie: session={s}; Path=/; HttpOnly; Secure"),
    ("cookie_header", "urlsafe40", "Cookie: theme=dark; sid={s}; lang=en"),
    (
        "oauth_client_secret_form",
        "urlsafe40",
        "grant_type=client_credentials&client_id=etl&client_secret={s}",
    ),
    ("oauth_refresh_token_form", "urlsafe68", "grant_type=refresh_token&refresh_token={s}&client_id=etl"),
    ("json_pwd", "password", '{{"user": "etl", "pwd": "{s}"}}'),
    ("json_connection_string", "b64_64", '{{"connectionString": "AccountName=acme;AccountKey={s}"}}'),
    ("escaped_json_password", "alnum24", 'body was {{\\"password\\": \\"{s}\\"}}'),
    ("xml_password", "password", "<Credentials><User>etl</User><Password>{s}</Password></Credentials>"),
    ("cli_password_flag", "password", "mysql -h db -u etl --password {s} dw"),
    ("curl_user", "password", "curl -u etl:{s} https://api.acme.com/v1/export"),
    ("password_in_prose", "password", "The password is '{s}' for user etl"),
    (
        "url_encoded_webhook",
        "alnum24",
        "callback=https%3A%2F%2Fhooks.slack.com%2Fservices%2FT0AB12%2FB0AB12%2F{s}",
    ),
    ("url_encoded_form", "alnum24", "client_secret%3D{s}%26scope%3Dread"),
]


def _secret(t: Tokens, kind: str) -> str:
    if kind == "password":
        return t.password()
    if kind == "telegram":
        return f"{t.chars(DIGITS, 10)}:AA{t.chars(URLSAFE, 33)}"
    if kind == "dapi":
        return f"dapi{t.chars(HEX, 32)}"
    if kind.startswith("b64_"):
        return t.b64(int(kind[4:]))
    alphabet, length = kind.rstrip(string.digits), int(kind[len(kind.rstrip(string.digits)) :])
    return t.chars({"alnum": ALNUM, "urlsafe": URLSAFE, "hex": HEX, "lower": LOWER}[alphabet], length)


def text_shapes(seed: int = 27) -> list[Shape]:
    """Over 60 secrets as they appear in error texts, responses and string values."""
    t = Tokens(seed)
    shapes = []
    for name, make in _FORMATS:
        token = make(t)
        shapes.append(Shape(name, token, f"request failed for credential {token} (401)"))
    for name, kind, template in _IN_TEXT:
        s = _secret(t, kind)
        fields = {
            "s": s,
            "q": quote(s, safe=""),
            "b": basic("etl", s),
            "u": t.uuid(),
            "d": t.chars(DIGITS, 18),
        }
        text = template.format(**fields, x=t.chars(HEX, 32))
        shapes.append(Shape(name, fields["b"] if "{b}" in template else s, text))
    jwt = t.jwt()
    shapes.append(Shape("jwt", jwt.rsplit(".", 1)[1], f"session renewed with {jwt} for svc"))
    key_id, key = f"AKIA{t.chars(UPPER, 16)}", t.chars(B64, 40)
    shapes += [
        Shape("aws_access_key_id", key_id, f"aws configure set {key_id} {key}"),
        Shape("aws_secret_access_key", key, f"aws configure set {key_id} {key}"),
    ]
    for label in ("RSA PRIVATE KEY", "OPENSSH PRIVATE KEY", "PGP PRIVATE KEY BLOCK"):
        line, pem = t.pem(label)
        shapes.append(Shape(label.lower().replace(" ", "_"), line, f"key file:\n{pem}\n"))
    for name, template in (("base64_password_pair", "password={s}"), ("base64_user_password", "etl:{s}")):
        s = t.chars(ALNUM, 20)
        shapes.append(Shape(name, s, base64.b64encode(template.format(s=s).encode()).decode()))
    return shapes


def encoded_forms(secret: str) -> list[str]:
    """How ``secret`` can show up encoded: as is, URL-encoded, and base64 at each alignment.

    For base64, the characters that encode the secret's bytes alone, whatever precedes it.
    """
    forms = [secret, quote(secret, safe=""), quote(secret), quote_plus(secret)]
    raw = secret.encode()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        forms.append(encoded[-(-4 * offset // 3) : (offset + len(raw)) * 4 // 3])
    return [form for form in dict.fromkeys(forms) if len(form) >= 6]
