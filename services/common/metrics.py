"""Prometheus metrics every service shares; service-specific ones live with the service."""

from __future__ import annotations

import logging

from prometheus_client import Counter, Histogram, start_http_server

from mediamesh.common.exposure import is_loopback
from mediamesh.common.listeners import address, bind_failure

log = logging.getLogger("mediamesh.security")

RPC_REQUESTS = Counter(
    "mediamesh_rpc_requests",
    "gRPC calls handled, by service, method and status code.",
    ["service", "method", "code"],
)
# From a millisecond (an echo call) to five minutes (a stream following a long video job).
REQUEST_LATENCY_BUCKETS = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
)  # fmt: skip
RPC_LATENCY = Histogram(
    "mediamesh_rpc_latency_seconds",
    "Time to handle a gRPC call (streams: until the stream ends).",
    ["service", "method"],
    buckets=REQUEST_LATENCY_BUCKETS,
)


def serve_metrics(section: str, host: str, port: int | None) -> None:
    """Expose /metrics over HTTP in a daemon thread; None leaves metrics unexposed.
    ListenError naming `{section}.metrics_port` when the port cannot be bound.

    /metrics takes no credential, so a non-loopback `host` (`{section}.metrics_host`) is the
    operator's choice, said at start; services call this only once they passed their own
    fail-closed check, so that a refused start exposes nothing."""
    if port is None:
        return
    try:
        # prometheus_client binds the socket itself: its error is translated, not prevented.
        start_http_server(port, addr=host.strip("[]"))
    except OSError as exc:
        raise bind_failure("metrics_port", host, port, exc, section=section) from exc
    if not is_loopback(host):
        log.info(
            "%s.metrics_host %s is not loopback: /metrics on %s answers anyone who reaches "
            "it (metrics take no credential)",
            section,
            host,
            address(host, port),
        )
