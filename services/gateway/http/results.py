"""A job's result bytes over HTTP, streamed from the scheduler's Download, with `Range`."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

from fastapi.responses import Response, StreamingResponse

from mediamesh.common.errors import MeshError, StatusCode
from mediamesh.gateway.api.json_plane import Chunk, JsonPlane
from mediamesh.gateway.core.tenancy import Caller
from mediamesh.gateway.http.ranges import parse_range

RANGE_NOT_SATISFIABLE = 416


async def result_response(
    plane: JsonPlane,
    job_id: str,
    caller: Caller,
    range_header: str | None,
    head: bool = False,
) -> Response:
    """The artifact (200), one range of it (206), or 416 for a range outside it; with `head`,
    the same status and headers without the body (HEAD), from the first chunk alone.

    Errors before the first byte (no such job, no result yet) raise MeshError, answered as
    JSON by the app's handler.
    """
    wanted = parse_range(range_header)
    start = wanted.first if wanted is not None and wanted.suffix is None else 0
    chunks = plane.download(job_id, caller, start)
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
    headers = {"Accept-Ranges": "bytes", "ETag": f'"{first.sha256}"'}
    if wanted is None:
        low, high = 0, total - 1
    else:
        bounds = wanted.bounds(total)
        if bounds is None:
            await chunks.aclose()
            return _unsatisfiable(total)
        low, high = bounds
        if low >= first.offset + len(first.data) and not head:
            # A suffix range beyond the first chunk: start again where it begins.
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
