"""The one exception the SDK raises for a call the gateway refused or could not finish."""

from __future__ import annotations


class GatewayError(Exception):
    """A failed call, without gRPC types.

    `code` is the gRPC status code name ("RESOURCE_EXHAUSTED", "UNAUTHENTICATED", ...),
    `message` the gateway's reason, and `retry_after_s` how long the gateway asked the caller
    to wait before trying again (0 when it said nothing).
    """

    def __init__(self, code: str, message: str, retry_after_s: float = 0.0) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s
