"""What every route reaches through the app: the plane, the body limit, readiness."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Header, Request

from mediamesh.gateway.api.json_plane import JsonPlane
from mediamesh.gateway.http.result_links import ResultLinks

# The API key, exactly as on gRPC: `Authorization: Bearer <key>`.
Authorization = Annotated[
    str | None, Header(description="`Bearer <API key>`; not needed on a mesh without keys")
]


@dataclass(frozen=True)
class HttpContext:
    """The HTTP face's collaborators."""

    plane: JsonPlane
    # Whether the gateway can reach its scheduler (the gRPC health answer, too).
    ready: Callable[[], bool]
    max_body_bytes: int
    # gateway.http.public_url: where clients reach this face, for absolute links; None to
    # take the request's own scheme and Host.
    public_url: str | None = None
    # Signs keyless links to results; None on a gateway without API keys, whose result
    # path needs no key anyway.
    result_links: ResultLinks | None = None


def context_of(request: Request) -> HttpContext:
    """The context the app was built with."""
    context: Any = request.app.state.context
    assert isinstance(context, HttpContext)
    return context


def base_url_of(request: Request) -> str:
    """The start of this face's absolute links: the configured public URL, else the URL the
    request was sent to (its scheme and Host header, as the client or a proxy wrote them)."""
    return context_of(request).public_url or str(request.base_url)


def result_url(
    base_url: str, job_id: str, presigned: str | None = None, signed_query: str | None = None
) -> str:
    """Where a job's result bytes can be fetched: the store's presigned URL when it gave one,
    else this gateway's own result endpoint under `base_url`, with `signed_query` (a
    ResultLinks query) for a client that sends no key. The one place result URLs are made,
    for the native and the OpenAI-compatible answers alike."""
    if presigned:
        return presigned
    url = f"{base_url.rstrip('/')}/v1/jobs/{job_id}/result"
    return f"{url}?{signed_query}" if signed_query else url


def with_links(job: dict[str, Any], base_url: str) -> dict[str, Any]:
    """`job` with its resource paths (under `base_url`'s path, a proxy's prefix, as result
    URLs are) and, when it has a result, the result's URL."""
    job_id = job["job_id"]
    path = f"{urlsplit(base_url).path.rstrip('/')}/v1/jobs/{job_id}"
    links = {"self": path, "events": f"{path}/events", "result": f"{path}/result"}
    result = job.get("result")
    if result is not None:
        result = {**result, "url": result_url(base_url, job_id, result.get("url"))}
    return {**job, "result": result, "links": links}
