"""Signing webhook deliveries, and checking a signature as a receiver does.

Each delivery carries `X-Mediamesh-Signature: t=<unix seconds>,v1=<hex>`, where the hex is
HMAC-SHA256, keyed with the tenant's secret, over `<t>.<body>` (the raw request body). The
timestamp is signed too, so a receiver that refuses old timestamps refuses replays.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Mediamesh-Signature"
EVENT_HEADER = "X-Mediamesh-Event"
DELIVERY_HEADER = "X-Mediamesh-Delivery"
# How old a signed timestamp a receiver accepts by default, in seconds.
DEFAULT_TOLERANCE_S = 300


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """Lowercase hex HMAC-SHA256 of `<timestamp>.<body>` keyed with `secret`."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    """The X-Mediamesh-Signature value for `body` sent at `timestamp`."""
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


def verify(
    secret: str, header: str, body: bytes, now: float, tolerance_s: float = DEFAULT_TOLERANCE_S
) -> bool:
    """Whether `header` signs `body` with `secret` at a time within `tolerance_s` of `now`."""
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = signature(secret, timestamp, body)
    return hmac.compare_digest(expected, parts.get("v1", ""))
