"""SMTP TLS against a real aiosmtpd server with a throwaway self-signed certificate."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_crashsafe.alerting import Alert, EmailSink, SinkError, build_sinks
from airflow_crashsafe.errors import ConfigurationError

controller_mod = pytest.importorskip("aiosmtpd.controller", reason="test dependency aiosmtpd missing")
smtp_mod = pytest.importorskip("aiosmtpd.smtp")
x509 = pytest.importorskip("cryptography.x509")

T0 = dt.datetime(2026, 1, 1, 3, 0, tzinfo=dt.timezone.utc)
ALERT = Alert("dk", "trigger", "critical", "scheduler dead", "prod", T0, T0)


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (cert file, key file)."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


class _Collect:
    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.logins: list[str] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(envelope)
        return "250 OK"

    def authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
        self.logins.append(data.login.decode())
        return smtp_mod.AuthResult(success=True)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(params=["ssl", "starttls"])
def tls_server(
    request: pytest.FixtureRequest, cert: tuple[Path, Path]
) -> Iterator[tuple[str, int, _Collect]]:
    """A real SMTP server speaking implicit TLS or STARTTLS with the self-signed certificate."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*cert)
    handler, port = _Collect(), _port()
    tls: dict[str, Any] = (
        {"ssl_context": context, "auth_require_tls": False}  # aiosmtpd cannot tell implicit TLS
        if request.param == "ssl"
        else {"tls_context": context, "require_starttls": True}
    )
    controller = controller_mod.Controller(
        handler, hostname="127.0.0.1", port=port, authenticator=handler.authenticate, **tls
    )
    controller.start()
    try:
        yield request.param, port, handler
    finally:
        controller.stop()


def _sink(mode: str, port: int, **extra: Any) -> EmailSink:
    flag: dict[str, Any] = {"use_ssl": True} if mode == "ssl" else {"starttls": True}
    return EmailSink(
        host="127.0.0.1", port=port, sender="wd@x.org", recipients=["a@x.org"], timeout=5, **flag, **extra
    )


def test_self_signed_certificate_is_refused_by_default(tls_server: tuple[str, int, _Collect]) -> None:
    """With ssl / starttls the server certificate is verified: a self-signed one fails the send."""
    mode, port, handler = tls_server
    with pytest.raises(SinkError, match="CERTIFICATE_VERIFY_FAILED"):
        _sink(mode, port).send(ALERT)
    assert handler.messages == []


def test_opt_out_or_own_ca_delivers_with_login(
    tls_server: tuple[str, int, _Collect], cert: tuple[Path, Path]
) -> None:
    """The explicit opt-out, or the server's CA in tls_ca_file, delivers and logs in over TLS."""
    mode, port, handler = tls_server
    _sink(mode, port, tls_insecure_skip_verify=True, username="wd", password="pw").send(ALERT)
    _sink(mode, port, tls_ca_file=str(cert[0]), username="wd", password="pw").send(ALERT)
    assert len(handler.messages) == 2
    assert handler.logins == ["wd", "wd"]


def test_login_without_tls_is_refused_unless_allowed() -> None:
    """username without ssl/starttls is a configuration error; allow_plaintext_login opts in."""
    spec = {"type": "email", "host": "h", "from": "a@x", "to": "b@x", "username": "u", "password": "p"}
    with pytest.raises(ConfigurationError, match="password in clear"):
        build_sinks([spec])
    assert build_sinks([{**spec, "allow_plaintext_login": True}])
    with pytest.raises(ConfigurationError, match="must be true or false"):
        build_sinks([{**spec, "ssl": "false"}])
