"""Channel options, retry service config and credentials for a gateway channel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc

from mediamesh.common.errors import StatusCode
from mediamesh.sdk.options import (
    RETRY_BACKOFF_MULTIPLIER,
    RETRY_INITIAL_BACKOFF_S,
    RETRY_MAX_BACKOFF_S,
    ClientSettings,
)

GATEWAY_SERVICE = "mediamesh.v1.Gateway"
# Calls that change nothing, or nothing more when repeated: a Cancel of a cancelled or ended
# job answers its state again. An over-limit answer is retried too, after the server's
# grpc-retry-pushback-ms.
IDEMPOTENT_METHODS = ("GetJob", "ListJobs", "ListModels", "Cancel")
# Safe to repeat on UNAVAILABLE: the methods above, and Submit, which always carries an
# idempotency key (see options.generate_params). The SDK sends them again itself (the api
# modules' _unary, flow.resend_wait; Generate and Watch before their first event in
# flow.JobStream), with the same backoff, and so sees each answer, one the gateway sent
# (UNAVAILABLE: its scheduler unreachable) included, which the channel's retries would hide
# until the caller's timeout_s ran out as a bare "Deadline Exceeded".
RESENT_BY_THE_SDK_METHODS = (*IDEMPOTENT_METHODS, "Submit")
# A stream the channel retries only before its first message.
STREAMED_METHODS = ("Download",)
# Safe to repeat only on an over-limit answer, which the gateway gives before the scheduler
# sees the call. After UNAVAILABLE the job may be deleted already, and a repeat would answer
# NOT_FOUND for a job that the caller's own call deleted.
REFUSED_FIRST_METHODS = ("DeleteJob",)
# What a channel that is not connected is asked, to learn why: a call no retry policy covers
# fails at once on a channel between connection tries with gRPC's account of the last one
# ("Tls handshake failed ...", "Connection refused"), which a call that ran out of time while
# gRPC retried (a bare "Deadline Exceeded") has lost. An empty HealthCheckRequest is valid.
CONNECTION_PROBE_METHOD = "/grpc.health.v1.Health/Check"
# Long enough for a channel between tries to answer, short enough to add little to a call
# already given up; a channel still connecting then tells nothing.
CONNECTION_PROBE_TIMEOUT_S = 0.25


def _retry_policy(codes: list[str]) -> dict[str, Any]:
    return {
        "maxAttempts": 5,  # gRPC's own ceiling
        "initialBackoff": f"{RETRY_INITIAL_BACKOFF_S:g}s",
        "maxBackoff": f"{RETRY_MAX_BACKOFF_S:g}s",
        "backoffMultiplier": RETRY_BACKOFF_MULTIPLIER,
        "retryableStatusCodes": codes,
    }


def service_config() -> str:
    """The gateway's gRPC service config: which methods retry, on which codes, how often."""
    config = {
        "methodConfig": [
            {
                "name": [{"service": GATEWAY_SERVICE, "method": m} for m in IDEMPOTENT_METHODS],
                "retryPolicy": _retry_policy([StatusCode.RESOURCE_EXHAUSTED]),
            },
            {
                "name": [{"service": GATEWAY_SERVICE, "method": m} for m in STREAMED_METHODS],
                "retryPolicy": _retry_policy([StatusCode.UNAVAILABLE]),
            },
            {
                "name": [{"service": GATEWAY_SERVICE, "method": m} for m in REFUSED_FIRST_METHODS],
                "retryPolicy": _retry_policy([StatusCode.RESOURCE_EXHAUSTED]),
            },
        ],
        # No "retryThrottling": gRPC takes a token for every retryable failure, an over-limit
        # answer with its pushback included, and stops all retries of the channel once half
        # are gone (5 of 10), earning one back per 10 successes. A caller reading at its
        # tenant's read rate is refused about as often as it succeeds, so throttling would
        # switch off the very retry that paces it, and its calls would fail at once with a
        # wait nothing honoured. Each call stays bounded without it: at most maxAttempts
        # tries within its deadline (timeout_s); an over-limit retry waits as long as the
        # gateway asks, and an UNAVAILABLE one backs off exponentially with jitter (a gateway
        # that is down fails the tries at the connection, sending nothing).
    }
    return json.dumps(config)


def channel_options(settings: ClientSettings) -> list[tuple[str, Any]]:
    """Message limits, retries and keepalive pings.

    Pings keep a quiet stream (a job waiting in a queue) from being cut by idle proxies and
    notice a dead gateway; the mesh's servers accept one ping per 20 s with calls open.
    """
    return [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.enable_retries", 1),
        ("grpc.service_config", service_config()),
        ("grpc.keepalive_time_ms", int(settings.keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def credentials(settings: ClientSettings) -> grpc.ChannelCredentials | None:
    """TLS credentials (the system's roots unless a CA file is given), or None for plaintext."""
    if not settings.uses_tls:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read(settings.ca_file),
        private_key=_read(settings.key_file),
        certificate_chain=_read(settings.cert_file),
    )


def _read(path: Path | None) -> bytes | None:
    return None if path is None else path.read_bytes()


def blocking_channel(settings: ClientSettings) -> grpc.Channel:
    """A grpc blocking channel to the gateway."""
    creds, options = credentials(settings), channel_options(settings)
    if creds is None:
        return grpc.insecure_channel(settings.target, options=options)
    return grpc.secure_channel(settings.target, creds, options=options)


def aio_channel(settings: ClientSettings) -> grpc.aio.Channel:
    """A grpc.aio channel to the gateway, bound to the running event loop."""
    creds, options = credentials(settings), channel_options(settings)
    if creds is None:
        return grpc.aio.insecure_channel(settings.target, options=options)
    return grpc.aio.secure_channel(settings.target, creds, options=options)


def call_metadata(settings: ClientSettings) -> tuple[tuple[str, str], ...]:
    """The API key as the gateway expects it."""
    return (("authorization", f"Bearer {settings.api_key}"),) if settings.api_key else ()
