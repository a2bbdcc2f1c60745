"""Readiness of a gateway that serves TLS, as `mediamesh up` sees it.

`up` knows no certificate authority the gateway's certificate chains to (it may be a
company CA or a public one issued for a DNS name, while `up` dials the address it gave the
process), so these probes complete the handshake without verifying the peer. They send no
credential and read only a readiness answer, from a child process `up` itself started on an
address of its own config; what they trust is where they dial, not the certificate.
"""

from __future__ import annotations

import http.client
import socket
import ssl

PROBE_TIMEOUT_S = 0.5


def _unverified_context(alpn: list[str]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(alpn)
    return context


def tls_handshake_completes(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TLS handshake (ALPN h2, as gRPC offers it) completes at host:port."""
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            _unverified_context(["h2"]).wrap_socket(raw),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False


def https_ready(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether GET /readyz over TLS at host:port answers 200 (the gateway reaches its
    scheduler)."""
    connection = http.client.HTTPSConnection(
        host, port, timeout=timeout, context=_unverified_context(["http/1.1"])
    )
    try:
        connection.request("GET", "/readyz")
        return connection.getresponse().status == 200
    except (OSError, ssl.SSLError, http.client.HTTPException):
        return False
    finally:
        connection.close()
