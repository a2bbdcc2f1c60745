"""The one mapping from `StatusCode` to what the KServe v2 API answers.

The KServe face follows Triton's conventions, so a client written against Triton sees the same
status for the same outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from mediamesh.common.errors import StatusCode, retry_after_ms

# The status the KServe API reports for a job that ended with each code. Triton answers an
# expired request with UNAVAILABLE ("Request timeout expired"); a job error that claims OK
# is a bug upstream, reported as INTERNAL.
KSERVE_STATUS: Mapping[StatusCode, StatusCode] = MappingProxyType(
    {code: code for code in StatusCode}
    | {
        StatusCode.DEADLINE_EXCEEDED: StatusCode.UNAVAILABLE,
        StatusCode.OK: StatusCode.INTERNAL,
    }
)
# Triton's message for an expired request, which clients match on.
TIMEOUT_MESSAGE = "Request timeout expired"


def kserve_code(name: str) -> StatusCode:
    """The status to answer for a job error named `name`; a name no code has is INTERNAL."""
    return KSERVE_STATUS[StatusCode.parse(name, default=StatusCode.INTERNAL)]


def stream_error_text(code: StatusCode, message: str, retry_after_s: float = 0) -> str:
    """The `error_message` of a ModelStreamInfer response, which has no status of its own,
    so the code and the retry hint travel inside the text: `CODE: message (retry after N ms)`.
    """
    text = f"{code}: {message}"
    if retry_after_s:
        text += f" (retry after {retry_after_ms(retry_after_s)} ms)"
    return text
