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
from dataclasses import dataclass
from urllib.parse import quote, quote_plus

__all__ = ["Shape", "Tokens", "encoded_forms", "text_shapes"]

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
UPPER = string.ascii_uppercase + string.digits


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


def text_shapes(seed: int = 27) -> list[Shape]:
    """At least 50 secrets as they appear in error texts, responses and string values."""
    t = Tokens(seed)
    shapes: list[Shape] = []

    def add(name: str, secret: str, text: str) -> None:
        shapes.append(Shape(name, secret, text))

    jwt = t.jwt()
    add("jwt", jwt.rsplit(".", 1)[1], f"session renewed with {jwt} for svc")
    for name, token in [
        ("github_pat_classic", f"ghp_{t.chars(ALNUM, 36)}"),
        ("github_pat_fine_grained", f"github_pat_{t.chars(ALNUM, 22)}_{t.chars(ALNUM, 59)}"),
        ("gitlab_pat", f"glpat-{t.chars(URLSAFE, 20)}"),
        (
            "slack_bot_token",
            f"xoxb-{t.chars(string.digits, 12)}-{t.chars(string.digits, 13)}-{t.chars(ALNUM, 24)}",
        ),
        ("stripe_live_key", f"sk_live_{t.chars(ALNUM, 99)}"),
        ("stripe_webhook_secret", f"whsec_{t.chars(ALNUM, 32)}"),
        ("google_api_key", f"AIza{t.chars(URLSAFE, 35)}"),
        ("google_oauth_token", f"ya29.{t.chars(URLSAFE, 120)}"),
        ("sendgrid_key", f"SG.{t.chars(URLSAFE, 22)}.{t.chars(URLSAFE, 43)}"),
        ("twilio_api_key", f"SK{t.chars(HEX, 32)}"),
        ("npm_token", f"npm_{t.chars(ALNUM, 36)}"),
        ("pypi_token", f"pypi-AgEIcHlwaS5vcmc{t.chars(URLSAFE, 60)}"),
        ("openai_key", f"sk-proj-{t.chars(URLSAFE, 48)}"),
        ("anthropic_key", f"sk-ant-api03-{t.chars(URLSAFE, 93)}"),
        ("databricks_token", f"dapi{t.chars(HEX, 32)}"),
        ("huggingface_token", f"hf_{t.chars(ALNUM, 34)}"),
        ("shopify_token", f"shpat_{t.chars(HEX, 32)}"),
        ("mailgun_key", f"key-{t.chars(HEX, 32)}"),
        ("vault_token", f"hvs.{t.chars(URLSAFE, 90)}"),
        ("doppler_token", f"dp.pt.{t.chars(ALNUM, 43)}"),
        ("docker_hub_token", f"dckr_pat_{t.chars(URLSAFE, 27)}"),
        ("new_relic_key", f"NRAK-{t.chars(UPPER, 27)}"),
        ("telegram_bot_token", f"{t.chars(string.digits, 10)}:AA{t.chars(URLSAFE, 33)}"),
    ]:
        add(name, token, f"request failed for credential {token} (401)")
    key_id, key = f"AKIA{t.chars(UPPER, 16)}", t.chars(B64, 40)
    add("aws_access_key_id", key_id, f"aws configure set {key_id} {key}")
    add("aws_secret_access_key", key, f"aws configure set {key_id} {key}")
    add(
        "slack_webhook",
        (s := t.chars(ALNUM, 24)),
        f"POST https://hooks.slack.com/services/T{t.chars(UPPER, 8)}/B{t.chars(UPPER, 10)}/{s} -> 404",
    )
    add(
        "discord_webhook",
        (s := t.chars(URLSAFE, 68)),
        f"https://discord.com/api/webhooks/{t.chars(string.digits, 18)}/{s}",
    )
    add(
        "teams_webhook",
        (s := t.chars(HEX, 32)),
        f"https://acme.webhook.office.com/webhookb2/{t.uuid()}@{t.uuid()}/IncomingWebhook/{s}/{t.uuid()}",
    )
    add(
        "telegram_bot_url",
        (s := f"{t.chars(string.digits, 10)}:AA{t.chars(URLSAFE, 33)}"),
        f"GET https://api.telegram.org/bot{s}/getMe",
    )
    add(
        "zapier_hook",
        (s := t.chars(string.ascii_lowercase + string.digits, 7)),
        f"https://hooks.zapier.com/hooks/catch/{t.chars(string.digits, 7)}/{s}/",
    )
    account_key = t.b64(64)
    add(
        "azure_storage_connection_string",
        account_key,
        f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={account_key};EndpointSuffix=core.windows.net",
    )
    add(
        "azure_service_bus_connection_string",
        (s := t.b64(32)),
        f"Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={s}",
    )
    add(
        "azure_sas_url",
        (s := quote(t.b64(32), safe="")),
        f"https://acme.blob.core.windows.net/c/x.csv?sv=2022-11-02&se=2030-01-01&sr=b&sp=r&sig={s}",
    )
    add(
        "azure_sas_token",
        (s := t.b64(32)),
        f"SharedAccessSignature sr=acme.servicebus.windows.net&sig={quote(s, safe='')}&se=1700000000",
    )
    add(
        "sql_server_connection_string",
        (p := t.password()),
        f"Server=tcp:db.acme.net,1433;Database=dw;User ID=etl;Password={p};Encrypt=True",
    )
    add(
        "sql_server_password_with_space",
        (p := t.chars(ALNUM, 6)),
        f"Data Source=db;User Id=etl;Password=correct horse {p};",
    )
    add("odbc_pwd", (p := t.password()), f"Driver={{ODBC Driver 18}};Server=db;Uid=etl;Pwd={p};")
    add(
        "snowflake_url",
        (p := t.password()),
        f"snowflake://etl:{quote(p, safe='')}@acme-xy12345/dw/public?warehouse=etl_wh",
    )
    add(
        "snowflake_connection_string",
        (p := t.password()),
        f"account=acme-xy12345;user=etl;password={p};warehouse=etl_wh",
    )
    add(
        "databricks_jdbc",
        (s := f"dapi{t.chars(HEX, 32)}"),
        f"jdbc:databricks://acme.cloud.databricks.com:443/default;transportMode=http;ssl=1;AuthMech=3;UID=token;PWD={s}",
    )
    add(
        "postgres_url",
        (p := t.password()),
        f"could not connect to postgresql://etl:{quote(p, safe='')}@db.acme.net:5432/dw",
    )
    add(
        "basic_auth_url",
        (p := t.password()),
        f"GET https://etl:{quote(p, safe='')}@api.acme.com/v1/export failed",
    )
    user_password = t.chars(ALNUM, 14)
    add(
        "authorization_basic",
        basic("etl", user_password),
        f"Authorization: Basic {basic('etl', user_password)}",
    )
    add(
        "basic_in_prose",
        basic("svc", s := t.chars(ALNUM, 3)),
        f"proxy rejected Basic {basic('svc', s)} for svc",
    )
    add("bearer_in_prose", (s := t.chars(URLSAFE, 40)), f"upstream said Bearer {s} has expired")
    add("authorization_token", (s := t.chars(HEX, 40)), f"Authorization: Token {s}")
    add(
        "digest_response",
        (s := t.chars(HEX, 32)),
        f'Authorization: Digest username="etl", realm="api", nonce="{t.chars(HEX, 32)}", response="{s}"',
    )
    add("datadog_api_key", (s := t.chars(HEX, 32)), f"DD-API-KEY: {s}")
    add("azure_functions_key", (s := t.chars(URLSAFE, 54)), f"x-functions-key: {s}")
    add("apim_subscription_key", (s := t.chars(HEX, 32)), f"Ocp-Apim-Subscription-Key: {s}")
    add("set_cookie", (s := t.chars(URLSAFE, 32)), f"Set-Cookie: session={s}; Path=/; HttpOnly; Secure")
    add("cookie_header", (s := t.chars(URLSAFE, 32)), f"Cookie: theme=dark; sid={s}; lang=en")
    add(
        "oauth_client_secret_form",
        (s := t.chars(URLSAFE, 40)),
        f"grant_type=client_credentials&client_id=etl&client_secret={s}",
    )
    add(
        "oauth_refresh_token_form",
        (s := t.chars(URLSAFE, 60)),
        f"grant_type=refresh_token&refresh_token={s}&client_id=etl",
    )
    add("json_pwd", (p := t.password()), f'{{"user": "etl", "pwd": "{p}"}}')
    add(
        "json_connection_string",
        (s := t.b64(64)),
        f'{{"connectionString": "AccountName=acme;AccountKey={s}"}}',
    )
    add("escaped_json_password", (p := t.chars(ALNUM, 16)), f'body was {{\\"password\\": \\"{p}\\"}}')
    add(
        "xml_password",
        (p := t.password()),
        f"<Credentials><User>etl</User><Password>{p}</Password></Credentials>",
    )
    add("cli_password_flag", (p := t.password()), f"mysql -h db -u etl --password {p} dw")
    add("curl_user", (p := t.password()), f"curl -u etl:{p} https://api.acme.com/v1/export")
    add("password_in_prose", (p := t.password()), f"The password is '{p}' for user etl")
    rsa_line, rsa = t.pem("RSA PRIVATE KEY")
    add("rsa_private_key", rsa_line, f"key file:\n{rsa}\n")
    ssh_line, ssh = t.pem("OPENSSH PRIVATE KEY")
    add("openssh_private_key", ssh_line, ssh)
    pgp_line, pgp = t.pem("PGP PRIVATE KEY BLOCK")
    add("pgp_private_key", pgp_line, pgp)
    add(
        "base64_password_pair", (s := t.chars(ALNUM, 20)), base64.b64encode(f"password={s}".encode()).decode()
    )
    add("base64_user_password", (s := t.chars(ALNUM, 20)), base64.b64encode(f"etl:{s}".encode()).decode())
    add(
        "url_encoded_webhook",
        (s := t.chars(ALNUM, 24)),
        "callback=" + quote(f"https://hooks.slack.com/services/T0000AAAA/B0000BBBB/{s}", safe=""),
    )
    add("url_encoded_form", (s := t.chars(ALNUM, 24)), quote(f"client_secret={s}&scope=read", safe=""))
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
