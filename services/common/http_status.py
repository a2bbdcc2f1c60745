"""The one mapping from `StatusCode` to HTTP status, for an HTTP face of the mesh.

Pure: a table and a lookup, no web framework. The pairs follow the canonical HTTP mapping
documented with the gRPC codes (google.rpc.Code), with 499 for a call the client cancelled.

Too large: HTTP separates "too large" (413) from "too many" (429), gRPC does not; both are
RESOURCE_EXHAUSTED. A caller marks the size case by raising `errors.PayloadTooLarge` (code
RESOURCE_EXHAUSTED, so gRPC answers are unchanged), and `http_status_of` answers 413 for it.

Too short a timeout: the scheduler refuses a job whose own `timeout_ms` is shorter than its
run on a free device can take as DEADLINE_EXCEEDED naming `timeout_ms` (gRPC's code, kept).
Only a longer timeout_ms can pass, so HTTP answers it as the request's fault (400), where 504
would tell clients (the openai client among them) to retry; any other DEADLINE_EXCEEDED, such
as the gateway's own call to the scheduler running out, stays 504.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from mediamesh.common.errors import MeshError, PayloadTooLarge, StatusCode, field_of

HTTP_STATUS: Mapping[StatusCode, int] = MappingProxyType(
    {
        StatusCode.OK: 200,
        StatusCode.CANCELLED: 499,
        StatusCode.UNKNOWN: 500,
        StatusCode.INVALID_ARGUMENT: 400,
        StatusCode.DEADLINE_EXCEEDED: 504,
        StatusCode.NOT_FOUND: 404,
        StatusCode.ALREADY_EXISTS: 409,
        StatusCode.PERMISSION_DENIED: 403,
        StatusCode.RESOURCE_EXHAUSTED: 429,
        StatusCode.FAILED_PRECONDITION: 400,
        StatusCode.ABORTED: 409,
        StatusCode.OUT_OF_RANGE: 400,
        StatusCode.UNIMPLEMENTED: 501,
        StatusCode.INTERNAL: 500,
        StatusCode.UNAVAILABLE: 503,
        StatusCode.DATA_LOSS: 500,
        StatusCode.UNAUTHENTICATED: 401,
    }
)
PAYLOAD_TOO_LARGE = 413
BAD_REQUEST = 400
# The job field a refusal for too short a timeout names (the scheduler's admission).
TIMEOUT_FIELD = "timeout_ms"


def http_status(code: StatusCode) -> int:
    """The HTTP status for `code`."""
    return HTTP_STATUS[code]


def http_status_of(error: MeshError) -> int:
    """The HTTP status to answer `error` with: its code's, 413 for a PayloadTooLarge, or 400
    for a `timeout_too_short` refusal."""
    if isinstance(error, PayloadTooLarge):
        return PAYLOAD_TOO_LARGE
    if timeout_too_short(error):
        return BAD_REQUEST
    return http_status(error.code)


def timeout_too_short(error: MeshError) -> bool:
    """Whether `error` refuses a job whose own `timeout_ms` is too short for it: no retry of
    the same request can pass."""
    return error.code is StatusCode.DEADLINE_EXCEEDED and field_of(error.message) == TIMEOUT_FIELD
