"""A local stand-in for an HTTPS service whose address a client hard-codes (events.pagerduty.com).

Some clients take no base URL: the PagerDuty provider's hook always posts to
``https://events.pagerduty.com``. They do honour the standard environment, as they must behind a
corporate egress proxy: ``HTTPS_PROXY`` names the proxy, ``SSL_CERT_FILE`` the CAs to trust. The
stand-in is both: a :class:`~airflow_crashsafe.testing.http.LocalServer` that answers
``CONNECT events.pagerduty.com:443`` itself and speaks TLS inside the tunnel with a certificate
for the named hosts, signed by a throwaway CA::

    from airflow_crashsafe.testing.tls import https_stand_in

    with https_stand_in(["events.pagerduty.com"], tmp_path) as stand_in:
        monkeypatch.setenv("HTTPS_PROXY", stand_in.proxy_url)
        monkeypatch.setenv("SSL_CERT_FILE", str(stand_in.ca_file))
        ...  # the unmodified client now reaches stand_in.server
    assert stand_in.server.requests[-1].headers["Host"] == "events.pagerduty.com"

Nothing is intercepted that the client did not send to the proxy; a host not in ``hosts`` fails
the TLS handshake, as a wrong certificate should.
"""

from __future__ import annotations

import datetime as dt
import ssl
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from airflow_crashsafe.testing.http import LocalServer, Received, Reply

__all__ = ["StandIn", "https_stand_in", "issue_certificate"]


@dataclass(frozen=True)
class StandIn:
    """The running stand-in: ``server`` (its requests), ``proxy_url``, and ``ca_file`` to trust."""

    server: LocalServer
    ca_file: Path

    @property
    def proxy_url(self) -> str:
        return self.server.url


def issue_certificate(hosts: Sequence[str], folder: Path) -> tuple[Path, ssl.SSLContext]:
    """A throwaway CA (its PEM file, for ``SSL_CERT_FILE``) and a server context for ``hosts``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "crashsafe test CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    folder.mkdir(parents=True, exist_ok=True)
    ca_file, chain_file, key_file = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    ca_file.write_bytes(ca.public_bytes(pem))
    chain_file.write_bytes(leaf.public_bytes(pem) + ca.public_bytes(pem))
    key_file.write_bytes(
        leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain_file, key_file)
    return ca_file, context


@contextmanager
def https_stand_in(
    hosts: Sequence[str], folder: Path, handler: Callable[[Received], Reply] | None = None
) -> Iterator[StandIn]:
    """Run a stand-in for ``https://<host>`` of each of ``hosts`` for the ``with`` block."""
    ca_file, context = issue_certificate(hosts, folder)
    with LocalServer(handler, tls=context) as server:
        yield StandIn(server, ca_file)
