"""Errors as HTTP answers: the status from `common.http_status` (the one mapping of the
transport-neutral codes), a JSON body `{code, message}`, and the headers HTTP clients act on:
`Retry-After` when the mesh asks the caller to wait, `WWW-Authenticate` with a 401, `Allow`
with a 405.

Under the OpenAI-compatible paths the body is OpenAI's shape instead, `{"error": {message,
type, code, param}}`, which its clients read; under the Open Inference Protocol's /v2 it is
that protocol's `{"error": message}`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from mediamesh.common.errors import (
    FailedPrecondition,
    InvalidArgument,
    MeshError,
    StatusCode,
    field_of,
)
from mediamesh.common.http_status import http_status_of, timeout_too_short

# vLLM-Omni's audio route (omni_audio.py) answers errors in the same shape, as vLLM does.
OPENAI_PREFIXES = ("/v1/images/", "/v1/videos", "/v1/models/", "/v1/audio/")
# OpenAI's paths that are also a prefix's folder: the listing, /v1/models, is OpenAI's as
# much as /v1/models/{id}, but a prefix without its slash would catch /v1/models-anything.
OPENAI_PATHS = ("/v1/models",)
# The Open Inference Protocol's REST paths (http/oip.py).
OIP_PREFIX = "/v2"
# The mesh's own API under /v1, whose errors keep the mesh's `{code, message}` shape even
# when no route matched. Any other /v1 path is one an OpenAI client may call (POST
# /v1/chat/completions): its 404 or 405 comes in OpenAI's shape, which that client reads.
MESH_PREFIXES = ("/v1/jobs",)
OPENAI_ROUTES = ("/v1/images/generations", "/v1/images/edits", "/v1/videos", "/v1/models")
AUDIO_ROUTE = "/v1/audio/generate"
UNSUPPORTED_MEDIA_TYPE = 415
CONFLICT = 409
# Seconds a caller is asked to wait when the mesh is unavailable and said for how long: the
# gateway rechecks its scheduler about this often, and a client that retries at once (the
# web page, a load balancer) would only add load to a mesh that is starting or recovering.
UNAVAILABLE_RETRY_AFTER_S = 2
# The scheme a 401 names (RFC 9110 11.6.1): the key goes in `Authorization: Bearer <key>`.
BEARER_CHALLENGE = 'Bearer realm="mediamesh"'
_INDEX = re.compile(r"\[\d+\]$")
# The methods a 405's Allow may name: those the routes are declared with.
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


class UnsupportedMediaType(InvalidArgument):
    """A body of a type the route does not read: HTTP 415 (gRPC has no such case). Its code
    stays INVALID_ARGUMENT, as for any other bad request body."""


class StateConflict(FailedPrecondition):
    """A request the resource's present state refuses (deleting a job that has not ended):
    HTTP 409, which clients read as "change the state first" (the openai client raises
    ConflictError), where FAILED_PRECONDITION alone maps to 400, a bad request. Its code stays
    FAILED_PRECONDITION."""


@contextmanager
def state_conflicts() -> Iterator[None]:
    """FAILED_PRECONDITION raised inside is answered as a StateConflict (409)."""
    try:
        yield
    except MeshError as error:
        if error.code is not StatusCode.FAILED_PRECONDITION or isinstance(error, StateConflict):
            raise
        raise StateConflict(error.message, retry_after_s=error.retry_after_s) from None


def error_response(
    error: MeshError, path: str = "", openai: bool = False, status: int | None = None
) -> JSONResponse:
    """The answer to `error` on `path`, with `status` if given, else the code's; in OpenAI's
    shape under its prefixes, or with `openai`."""
    if status is None and isinstance(error, UnsupportedMediaType):
        status = UNSUPPORTED_MEDIA_TYPE
    if status is None and isinstance(error, StateConflict):
        status = CONFLICT
    status = status or http_status_of(error)
    message = _encodable(error.message)
    body: dict[str, object] = {"code": str(error.code), "message": message}
    if path == OIP_PREFIX or path.startswith(OIP_PREFIX + "/"):
        body = {"error": message}
    elif openai or path in OPENAI_PATHS or path.startswith(OPENAI_PREFIXES):
        body = {
            "error": {
                "message": message,
                # OpenAI's two kinds: the request's fault or the server's.
                "type": "server_error" if status >= 500 else "invalid_request_error",
                "code": str(error.code),
                "param": field_of(message),
            }
        }
    return JSONResponse(body, status_code=status, headers=_headers(error, status))


def _encodable(text: str) -> str:
    """`text` as UTF-8 can carry it: a message may quote what a client sent (a path, a
    field's name), and a lone surrogate there would fail the response's own encoding, a 500
    with no JSON body in place of the refusal. Such a character is written as its escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _headers(error: MeshError, status: int) -> dict[str, str]:
    """What a client needs beside the body to act on `error`'s answer."""
    headers = {}
    wait = error.retry_after_s
    if wait <= 0 and error.code is StatusCode.UNAVAILABLE:
        wait = UNAVAILABLE_RETRY_AFTER_S
    if wait > 0:
        headers["Retry-After"] = str(max(1, math.ceil(wait)))
    elif error.code is StatusCode.RESOURCE_EXHAUSTED or timeout_too_short(error):
        # A limit no wait lifts (more jobs than the tenant's burst, a timeout_ms shorter than
        # the job can run): the openai client retries a 429 (and a 5xx) unless told not to,
        # here in its own header.
        headers["X-Should-Retry"] = "false"
    if status == 401:
        headers["WWW-Authenticate"] = BEARER_CHALLENGE
    return headers


@contextmanager
def renamed_fields(heads: Mapping[str, str]) -> Iterator[None]:
    """Errors raised inside name the field the client sent, not the mesh's: `heads` maps a
    mesh field to the text that replaces its `field:` at the message's start (which is what
    `param` of OpenAI's error shape is read from), e.g. "after_job_id" to "after:". An
    element of a list field (`models[0]`) is renamed as its field is."""
    try:
        yield
    except MeshError as error:
        field, colon, rest = error.message.partition(":")
        head = heads.get(field) or heads.get(_INDEX.sub("", field))
        if colon and head:
            error.message = f"{head}{rest}"
            error.args = (error.message,)
        raise


def _methods_of(request: Request) -> list[str]:
    """Every method some route of the app serves on the request's path, asked of the
    routes as the router asks them (included routers answer for their own routes)."""
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return allowed


def install(app: FastAPI) -> None:
    """Answers MeshError, request validation failures and routing errors as JSON."""

    async def mesh_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, MeshError)
        return error_response(exc, request.url.path)

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {"loc": ("request",), "msg": "invalid"}
        # loc is ("body" | "query" | "path" | "header", name, ...): name the field itself.
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "request"
        return error_response(InvalidArgument(f"{where}: {first.get('msg')}"), request.url.path)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = {404: StatusCode.NOT_FOUND, 405: StatusCode.UNIMPLEMENTED}.get(
            exc.status_code, StatusCode.INVALID_ARGUMENT
        )
        path = request.url.path
        # No route matched (or none with this method): under /v1 outside the mesh's own
        # paths the caller is likely an OpenAI client (the /v1/models listing is OpenAI's
        # too), so the answer is in OpenAI's shape.
        openai = path.startswith("/v1/") and not path.startswith(MESH_PREFIXES)
        message = str(exc.detail)
        if openai and exc.status_code == 404 and message == "Not Found":
            message = (
                f"Invalid URL ({request.method} {path[:128]}): this gateway serves "
                f"{', '.join(OPENAI_ROUTES)} of OpenAI's API and vLLM-Omni's "
                f"{AUDIO_ROUTE}"
            )
        response = error_response(MeshError(message, code=code), path, openai, exc.status_code)
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:
            # RFC 9110 requires Allow here. The router's names only the first route that
            # matched the path, and a path may have several (GET and POST /v1/jobs).
            response.headers["Allow"] = ", ".join(_methods_of(request))
        return response

    app.add_exception_handler(MeshError, mesh_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
