"""A job's result bytes over HTTP, streamed from the scheduler's Download, with `Range`,
`If-None-Match` and the caching headers of bytes that never change."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator

from fastapi.responses import Response, StreamingResponse

from mediamesh.common.errors import MeshError, StatusCode
from mediamesh.common.output_formats import extension_for
from mediamesh.gateway.api.json_plane import Chunk, JsonPlane
from mediamesh.gateway.core.tenancy import Caller
from mediamesh.gateway.http.ranges import BEYOND_ANY_BODY, parse_range

NOT_MODIFIED = 304
RANGE_NOT_SATISFIABLE = 416
# A job's result never changes once made, so a cache may keep it without asking again:
# `immutable` spares even the revalidation of a reload. `private`: only the caller's own
# cache, since another key may not read it, and Vary says the answer depends on the key. A
# day, the scheduler's default retention_s: the result is not served for much longer.
_CACHING = {
    "Cache-Control": "private, max-age=86400, immutable",
    "Vary": "Authorization",
}
_UNSAFE_IN_NAMES = re.compile(r"[^A-Za-z0-9._-]")


async def result_response(
    plane: JsonPlane,
    job_id: str,
    caller: Caller,
    range_header: str | None,
    head: bool = False,
    if_none_match: str | None = None,
    if_range: str | None = None,
) -> Response:
    """The artifact (200), one range of it (206), 416 for a range outside it, or 304 when
    `if_none_match` names its ETag; with `head`, the same status and headers without the
    body (HEAD), from the first chunk alone. A range with an `if_range` that is not the
    artifact's ETag is ignored (RFC 9110 13.1.5): the client's copy is of other bytes, and
    a part of these spliced onto it would be neither.

    Errors before the first byte (no such job, no result yet) raise MeshError, answered as
    JSON by the app's handler.
    """
    wanted = parse_range(range_header)
    start = wanted.first if wanted is not None and wanted.suffix is None else 0
    if if_none_match is not None or (wanted is not None and if_range is not None):
        # The ETag comes with the first chunk, and a match answers 304 whatever the range
        # (RFC 9110 13.2.2), as a mismatched If-Range answers the whole: start at 0, where
        # every artifact has a chunk.
        start = 0
    # Download offsets are uint64: a larger one is sent as the largest, past every end.
    chunks = plane.download(job_id, caller, min(start, BEYOND_ANY_BODY - 1))
    try:
        first = await anext(chunks, None)
    except MeshError as exc:
        if wanted is not None and exc.code is StatusCode.INVALID_ARGUMENT:
            # The offset is past the end; a 416 still owes the client the whole length.
            return _unsatisfiable(await _artifact_size(plane, job_id, caller, exc))
        raise
    if first is None:
        # Nothing from `start` on: an empty artifact, or a range starting at its end.
        if wanted is None:
            return Response(b"", headers={"Accept-Ranges": "bytes"})
        return _unsatisfiable(start)
    total = first.total_size
    etag = f'"{first.sha256}"'
    headers = {"Accept-Ranges": "bytes", "ETag": etag, **_CACHING}
    if if_none_match is not None and _matches(if_none_match, etag):
        await chunks.aclose()
        return Response(status_code=NOT_MODIFIED, headers={"ETag": etag, **_CACHING})
    if if_range is not None and if_range.strip() != etag:
        # Strong comparison: a weak tag or a date (no Last-Modified is sent) never matches.
        wanted = None
    headers["Content-Disposition"] = _disposition(job_id, first.mime_type)
    if wanted is None:
        low, high = 0, total - 1
    else:
        bounds = wanted.bounds(total)
        if bounds is None:
            await chunks.aclose()
            return _unsatisfiable(total)
        low, high = bounds
        if low >= first.offset + len(first.data) and not head:
            # A range beyond the first chunk: start again where it begins.
            await chunks.aclose()
            chunks = plane.download(job_id, caller, low)
            first = await anext(chunks)
        headers["Content-Range"] = f"bytes {low}-{high}/{total}"
    headers["Content-Length"] = str(high - low + 1)
    media_type = first.mime_type or "application/octet-stream"
    status = 200 if wanted is None else 206
    if head:
        await chunks.aclose()
        # The Content-Length set above stays: it is the length a GET would send.
        return Response(status_code=status, media_type=media_type, headers=headers)
    return StreamingResponse(
        _between(first, chunks, low, high),
        status_code=status,
        media_type=media_type,
        headers=headers,
    )


def _matches(if_none_match: str, etag: str) -> bool:
    """Whether an If-None-Match header names `etag` (or is `*`), compared weakly as RFC 9110
    13.1.2 has it: `W/"x"` matches `"x"`."""
    tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
    return "*" in tags or etag in tags


def _disposition(job_id: str, mime_type: str) -> str:
    """`inline` with a file name for a browser's Save: the job id (only the characters a job
    id has, so nothing from the path can break out of the quotes) and the type's extension."""
    name = _UNSAFE_IN_NAMES.sub("", job_id)[:128] or "result"
    return f'inline; filename="{name}.{extension_for(mime_type)}"'


async def _artifact_size(
    plane: JsonPlane, job_id: str, caller: Caller, past_the_end: MeshError
) -> int:
    """The size of the job's artifact, from the job (which names it without sending any of
    its bytes); `past_the_end` again if the result went away meanwhile."""
    result = (await plane.job(job_id, caller))["result"]
    if result is None:
        raise past_the_end
    size: int = result["size_bytes"]
    return size


def _unsatisfiable(total: int) -> Response:
    """416 naming the whole length, as RFC 9110 has it (15.5.17, 14.4: `bytes */1234`)."""
    return Response(
        b"", status_code=RANGE_NOT_SATISFIABLE, headers={"Content-Range": f"bytes */{total}"}
    )


async def _between(
    first: Chunk, rest: AsyncGenerator[Chunk, None], low: int, high: int
) -> AsyncIterator[bytes]:
    """The bytes low..high (inclusive) of the chunks, `first` then `rest`."""
    chunk: Chunk | None = first
    while chunk is not None:
        begin, end = chunk.offset, chunk.offset + len(chunk.data)
        if end > low and begin <= high:
            yield chunk.data[max(low - begin, 0) : min(high + 1, end) - begin]
        if end > high:
            break
        chunk = await anext(rest, None)
    await rest.aclose()
