"""The local CA and one certificate per workload identity, for mTLS between the services.

`make up` (and the test suite) run this: var/tls/ca.pem is the CA every service and client
trusts; var/tls/<identity>.pem / .key is the certificate and key of one identity (gateway,
listener, ingest, timeline, likes, flusher, operator, watcher). Each certificate carries its
identity as a SPIFFE URI SAN (spiffe://agora/sa/<identity>) and as its common name, and is valid
for the server name `localhost` (and 127.0.0.1), so it serves as both a server and a client
certificate.

LOCAL DEVELOPMENT ONLY: on Kubernetes, cert-manager (dev overlay) or the platform's PKI (prod)
issues them; nothing here is a secret worth anything outside a laptop.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Workload identities, and the local MariaDB's server certificate (TLS with CA verification, as
# a managed MySQL is reached).
IDENTITIES = (
    "gateway",
    "listener",
    "ingest",
    "timeline",
    "likes",
    "flusher",
    "operator",
    "watcher",
    "mariadb",
)
TRUST_DOMAIN = "agora"
_VALIDITY = datetime.timedelta(days=365)


def spiffe_id(identity: str) -> str:
    return f"spiffe://{TRUST_DOMAIN}/sa/{identity}"


@dataclass(frozen=True)
class Authority:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes, mode: int) -> None:
    path.write_bytes(data)
    os.chmod(path, mode)


def make_authority(directory: Path) -> Authority:
    """A new CA, written as ca.pem (and ca.key, which signs and never leaves the machine)."""
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agora local CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    _write(directory / "ca.pem", cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(directory / "ca.key", _pem_key(key), 0o600)
    return Authority(cert, key)


def load_authority(directory: Path) -> Authority:
    cert = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
    key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("ca.key is not the EC key this tool writes")
    return Authority(cert, key)


def issue(
    authority: Authority, identity: str, directory: Path, hosts: tuple[str, ...] = ()
) -> None:
    """<identity>.pem and <identity>.key: a server-and-client certificate for `identity`."""
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [
        x509.UniformResourceIdentifier(spiffe_id(identity)),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        *(x509.DNSName(h) for h in hosts),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity)]))
        .issuer_name(authority.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(authority.key, hashes.SHA256())
    )
    _write(directory / f"{identity}.pem", cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(directory / f"{identity}.key", _pem_key(key), 0o600)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def ensure(directory: Path, identities: tuple[str, ...] = IDENTITIES) -> None:
    """The CA and every identity's certificate, made once (kept across `make up`)."""
    authority = (
        load_authority(directory) if (directory / "ca.key").exists() else make_authority(directory)
    )
    for identity in identities:
        if not (directory / f"{identity}.pem").exists():
            issue(authority, identity, directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args()
    ensure(args.dir)


if __name__ == "__main__":
    main()
