"""The one mapping between `StatusCode` and gRPC's `grpc.StatusCode`.

Servers abort with `to_grpc(...)`; clients turn a received status back with `from_grpc(...)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import grpc

from mediamesh.common.errors import StatusCode

# The enum's values are the gRPC names by design, so the table is the name match; building
# it here (and failing at import on a missing name) keeps a drift between the two visible.
GRPC_STATUS: Mapping[StatusCode, grpc.StatusCode] = MappingProxyType(
    {code: grpc.StatusCode[code.value] for code in StatusCode}
)
_FROM_GRPC: Mapping[grpc.StatusCode, StatusCode] = MappingProxyType(
    {grpc_code: code for code, grpc_code in GRPC_STATUS.items()}
)


def to_grpc(code: StatusCode) -> grpc.StatusCode:
    """The gRPC status a server answers for `code`."""
    return GRPC_STATUS[code]


def from_grpc(code: grpc.StatusCode | None) -> StatusCode:
    """The code of a received gRPC status; no status yet (None) means the call went well."""
    if code is None:
        return StatusCode.OK
    return _FROM_GRPC.get(code, StatusCode.UNKNOWN)


_BY_NUMBER: Mapping[int, StatusCode] = MappingProxyType(
    {grpc_code.value[0]: code for code, grpc_code in GRPC_STATUS.items()}
)


def to_number(code: StatusCode) -> int:
    """`code` as gRPC numbers it on the wire (google.rpc.Code): what a status field holds."""
    number: int = GRPC_STATUS[code].value[0]
    return number


def from_number(number: int) -> StatusCode:
    """The code a status field's number stands for; UNKNOWN for a number gRPC does not use."""
    return _BY_NUMBER.get(number, StatusCode.UNKNOWN)
