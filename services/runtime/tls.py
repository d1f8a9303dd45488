"""mTLS between the services: every gRPC listener requires a client certificate from the
deployment's CA, every client presents its own, and the certificate's SPIFFE id names the caller.

The files are the CA, a certificate and its key (PEM): var/tls/ locally (tools/certs.py),
mounted from a cert-manager or platform Secret on Kubernetes. Files are read at start-up; a
missing or unreadable file stops the process with the path in the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from services.runtime.config import EnvSettings

SPIFFE_PREFIX = "spiffe://agora/sa/"


class MtlsSettings(EnvSettings):
    """Where this workload's certificate, its key and the CA it trusts are (PEM files), for
    every process that serves or calls gRPC APIs."""

    grpc_tls_ca: Path
    grpc_tls_cert: Path
    grpc_tls_key: Path

    def tls_material(self) -> TlsMaterial:
        return TlsMaterial.load(self.grpc_tls_ca, self.grpc_tls_cert, self.grpc_tls_key)


@dataclass(frozen=True)
class TlsMaterial:
    ca: bytes
    cert: bytes
    key: bytes

    @classmethod
    def load(cls, ca: Path, cert: Path, key: Path) -> TlsMaterial:
        read = {}
        for name, path in (("ca", ca), ("cert", cert), ("key", key)):
            try:
                read[name] = path.read_bytes()
            except OSError as exc:
                raise SystemExit(f"GRPC_TLS_{name.upper()}: {path}: {exc.strerror}") from exc
        return cls(**read)

    def server_credentials(self) -> grpc.ServerCredentials:
        """A listener that requires (and verifies) a client certificate from the CA."""
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.ca, require_client_auth=True
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """A client that verifies the server against the CA and presents its own certificate."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )


def caller_identity(context: grpc.aio.ServicerContext) -> str | None:
    """The workload identity of the peer (…/sa/<identity> of its certificate), if any."""
    for value in context.auth_context().get("peer_spiffe_id", []):
        text = value.decode() if isinstance(value, bytes) else str(value)
        if text.startswith(SPIFFE_PREFIX):
            return text.removeprefix(SPIFFE_PREFIX)
    return None
