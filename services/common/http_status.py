"""The one mapping from `StatusCode` to HTTP status, for an HTTP face of the mesh.

Pure: a table and a lookup, no web framework. The pairs follow the canonical HTTP mapping
documented with the gRPC codes (google.rpc.Code), with 499 for a call the client cancelled.

Too large: HTTP separates "too large" (413) from "too many" (429), gRPC does not; both are
RESOURCE_EXHAUSTED. A caller marks the size case by raising `errors.PayloadTooLarge` (code
RESOURCE_EXHAUSTED, so gRPC answers are unchanged), and `http_status_of` answers 413 for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from mediamesh.common.errors import MeshError, PayloadTooLarge, StatusCode

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


def http_status(code: StatusCode) -> int:
    """The HTTP status for `code`."""
    return HTTP_STATUS[code]


def http_status_of(error: MeshError) -> int:
    """The HTTP status to answer `error` with: its code's, or 413 for a PayloadTooLarge."""
    if isinstance(error, PayloadTooLarge):
        return PAYLOAD_TOO_LARGE
    return http_status(error.code)
