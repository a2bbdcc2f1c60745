"""Signing webhook deliveries, and checking a signature as a receiver does.

Each delivery carries `X-Mediamesh-Signature: t=<unix seconds>,v1=<hex>`, where the hex is
HMAC-SHA256, keyed with the tenant's secret, over `<t>.<body>` (the raw request body). The
timestamp is signed too, so a receiver that refuses old timestamps refuses replays.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

SIGNATURE_HEADER = "X-Mediamesh-Signature"
EVENT_HEADER = "X-Mediamesh-Event"
DELIVERY_HEADER = "X-Mediamesh-Delivery"
# How old a signed timestamp a receiver accepts by default, in seconds.
DEFAULT_TOLERANCE_S = 300
# What a well-formed header's parts are: ASCII digits, and 64 lowercase hex digits. Anything
# else (non-ASCII included, which `hmac.compare_digest` refuses on str with a TypeError) is
# not a signature of ours, so it verifies nothing, and raises nothing either.
_TIMESTAMP = re.compile(r"[0-9]{1,20}")
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """Lowercase hex HMAC-SHA256 of `<timestamp>.<body>` keyed with `secret`."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    """The X-Mediamesh-Signature value for `body` sent at `timestamp`."""
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


def verify(
    secret: str,
    header: str,
    body: bytes,
    now: float | None = None,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> bool:
    """Whether `header` signs `body` with `secret` at a time within `tolerance_s` of `now`
    (the current time when not given), as a receiver checks a delivery."""
    if now is None:
        now = time.time()
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    stamp, given = parts.get("t", ""), parts.get("v1", "")
    # `int` alone would take "1_700_000_000", " 17" and other digits than ASCII ones.
    if not _TIMESTAMP.fullmatch(stamp) or not _HEX_DIGEST.fullmatch(given):
        return False
    timestamp = int(stamp)
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = signature(secret, timestamp, body)
    # Compared as bytes: both are ASCII by now, and bytes never raise in compare_digest.
    return hmac.compare_digest(expected.encode("ascii"), given.encode("ascii"))
