"""Domain errors and their transport-neutral status codes.

Each transport maps `StatusCode` once, in its own module: gRPC in
`mediamesh.common.api.status`, HTTP in `mediamesh.common.http_status`, and the KServe
(Triton-compatible) answers in `mediamesh.gateway.core.kserve_status`.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum


class StatusCode(StrEnum):
    """The canonical status codes. Values are the gRPC code names, which is what the job store
    and the proto `code` string fields hold, so a member compares equal to a stored name."""

    OK = "OK"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"
    UNAVAILABLE = "UNAVAILABLE"
    DATA_LOSS = "DATA_LOSS"
    UNAUTHENTICATED = "UNAUTHENTICATED"

    @classmethod
    def parse(cls, name: str, default: StatusCode | None = None) -> StatusCode:
        """The member named `name` (as read from a store or a peer), else `default`.

        Without a default an unknown name is UNKNOWN, as gRPC treats a code it cannot read.
        """
        try:
            return cls(name)
        except ValueError:
            return cls.UNKNOWN if default is None else default


class MeshError(Exception):
    """An error a caller should see as-is, with the status `code` each transport maps."""

    code: StatusCode = StatusCode.INTERNAL

    def __init__(
        self, message: str, *, code: StatusCode | None = None, retry_after_s: float = 0
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = StatusCode(code)
        self.retry_after_s = retry_after_s


def retry_after_ms(retry_after_s: float) -> int:
    """A retry hint in whole milliseconds, rounded up and at least 1: rounded down, a wait
    under a millisecond became 0, which sends the client back before the limit lifts, and
    gRPC's own retries of a 0 ms pushback could hang until the call's deadline."""
    # Rounded to a nanosecond first: 0.29 * 1000 is 290.00000000000006 in floating point.
    return max(1, math.ceil(round(retry_after_s * 1000, 6)))


class InvalidArgument(MeshError):
    code = StatusCode.INVALID_ARGUMENT


class NotFound(MeshError):
    code = StatusCode.NOT_FOUND


class ResourceExhausted(MeshError):
    code = StatusCode.RESOURCE_EXHAUSTED


class PayloadTooLarge(ResourceExhausted):
    """A request or answer over a size limit, as opposed to a rate or queue limit.

    gRPC has no code of its own for it and answers RESOURCE_EXHAUSTED (as grpcio does for a
    message over its maximum), so the code stays RESOURCE_EXHAUSTED; HTTP tells the two
    apart, and `mediamesh.common.http_status.http_status_of` answers 413 for this class
    instead of 429. Raise this class, not ResourceExhausted, for anything "too large".
    """


class Unauthenticated(MeshError):
    code = StatusCode.UNAUTHENTICATED


class PermissionDenied(MeshError):
    code = StatusCode.PERMISSION_DENIED


class FailedPrecondition(MeshError):
    code = StatusCode.FAILED_PRECONDITION


class Unavailable(MeshError):
    code = StatusCode.UNAVAILABLE


class StartupError(RuntimeError):
    """A service cannot start (a model that does not load or fit, a bad bind); exit with it."""


# Trailing metadata key with the milliseconds a rejected caller should wait before retrying.
RETRY_AFTER_KEY = "retry-after-ms"
# The same wait under gRPC's standard name: a client whose service config retries the status
# waits this long before its next attempt (gRFC A6), with no code of its own.
PUSHBACK_KEY = "grpc-retry-pushback-ms"


# A field path as the mesh writes one at a message's start: names joined by dots, each with
# the index of a list item it picks, if any (`steps`, `webhook.url`, `adapters[0].scale`).
# Names are the protos' and the HTTP bodies' fields, lower snake case: gRPC's own messages
# start with capitals ("SERVER: Received message larger than max", "CLIENT: Sent ..."),
# which name no field.
_FIELD_NAME = r"[a-z][a-z0-9_]*(?:\[\d+\])*"
_FIELD_PATH = re.compile(rf"{_FIELD_NAME}(?:\.{_FIELD_NAME})*", re.ASCII)


def field_of(message: str) -> str | None:
    """The request field a mesh error message names, as written there, or None.

    The mesh starts a message about one field with its path (`steps: must be ...`,
    `adapters[0].scale: ...`, `webhook.events[1]: ...`), which the SDK's GatewayError.field
    and the HTTP face's OpenAI `param` both read. Anything else before a colon (`failed to
    connect to all addresses; ...`, gRPC's `SERVER: ...` and `CLIENT: ...`) is not one."""
    head, sep, _ = message.partition(":")
    return head if sep and _FIELD_PATH.fullmatch(head) else None
