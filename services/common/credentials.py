"""The mesh's internal credential: a shared token, TLS, or mutual TLS, read once at start.

Servers (scheduler, workers) and clients (the gateway's link to the scheduler, the scheduler's
links to workers, a worker's session, the CLI) all build their gRPC credentials from here, so
every internal channel is protected the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from mediamesh.common.secret_files import (
    check_ca,
    read_key_pair,
    read_setting_file,
    warn_if_shared,
)
from mediamesh.common.settings import ConfigError, InternalTlsSettings, MeshConfig

# What the scheduler and workers say when they would serve every caller.
NO_INTERNAL_CREDENTIAL = (
    "no internal credential is configured (internal_auth.token or token_file, or "
    "internal_tls with ca_file for mutual TLS)"
)


@dataclass(frozen=True)
class InternalCredentials:
    """What internal calls present and internal servers demand. PEM bytes, not paths: read
    when the process starts, so a missing file fails the start, not a later call."""

    token: str | None = None
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    server_name: str | None = None

    @classmethod
    def from_config(cls, config: MeshConfig) -> InternalCredentials:
        """The credential `config` describes (`internal_auth`, `internal_tls`); ConfigError
        naming the field when a file cannot be read or holds no usable token, certificate or
        key, checked here because gRPC would report it only as a failed bind or call."""
        auth = config.internal_auth
        token = auth.resolve()
        if auth.token_file is not None:
            warn_if_shared(auth.token_file, "internal_auth.token_file")
        tls: InternalTlsSettings = config.internal_tls
        ca = cert = key = None
        if tls.ca_file is not None:
            ca = read_setting_file(tls.ca_file, "internal_tls.ca_file")
            check_ca(tls.ca_file, "internal_tls.ca_file")
        # The settings refuse one file of the pair without the other.
        if tls.cert_file is not None and tls.key_file is not None:
            cert, key = read_key_pair(
                tls.cert_file, tls.key_file, "internal_tls.cert_file", "internal_tls.key_file"
            )
        return cls(token=token, ca=ca, cert=cert, key=key, server_name=tls.server_name)

    @property
    def tls(self) -> bool:
        """Whether internal channels use TLS."""
        return self.ca is not None or self.cert is not None

    @property
    def mutual(self) -> bool:
        """Whether servers demand, and clients present, a certificate the CA signed."""
        return self.ca is not None and self.cert is not None and self.key is not None

    @property
    def authenticates(self) -> bool:
        """Whether a server with this credential refuses callers that lack it."""
        return self.token is not None or self.mutual

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """TLS for an internal server (None: plaintext); client certificates required
        whenever a CA is configured."""
        if not self.tls:
            return None
        if self.cert is None or self.key is None:
            raise ConfigError(
                "internal_tls: a server needs cert_file and key_file (ca_file alone only "
                "lets clients verify servers)"
            )
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)],
            root_certificates=self.ca,
            require_client_auth=self.ca is not None,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """TLS for an internal client (None: plaintext), with its certificate for mTLS."""
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        """Channel options the credential needs: the name servers' certificates carry."""
        if self.tls and self.server_name:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []

    def aio_channel(
        self,
        address: str,
        options: Sequence[tuple[str, Any]] = (),
        interceptors: Sequence[Any] = (),
    ) -> grpc.aio.Channel:
        """An asyncio channel to an internal server, over TLS when configured."""
        merged = [*options, *self.channel_options()]
        credentials = self.channel_credentials()
        if credentials is None:
            return grpc.aio.insecure_channel(address, options=merged, interceptors=interceptors)
        return grpc.aio.secure_channel(
            address, credentials, options=merged, interceptors=interceptors
        )

    def blocking_channel(
        self, address: str, options: Sequence[tuple[str, Any]] = ()
    ) -> grpc.Channel:
        """A blocking channel to an internal server (the CLI, health checks)."""
        merged = [*options, *self.channel_options()]
        credentials = self.channel_credentials()
        if credentials is None:
            return grpc.insecure_channel(address, options=merged)
        return grpc.secure_channel(address, credentials, options=merged)
