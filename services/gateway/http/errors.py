"""Errors as HTTP answers: the status from `common.http_status` (the one mapping of the
transport-neutral codes), a JSON body `{code, message}`, and `Retry-After` when the mesh
asks the caller to wait.

Under the OpenAI-compatible paths the body is OpenAI's shape instead, `{"error": {message,
type, code, param}}`, which its clients read.
"""

from __future__ import annotations

import math

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from mediamesh.common.errors import InvalidArgument, MeshError, StatusCode
from mediamesh.common.http_status import http_status_of

OPENAI_PREFIXES = ("/v1/images/", "/v1/videos")


def error_response(error: MeshError, path: str = "") -> JSONResponse:
    """The answer to `error` on `path`."""
    status = http_status_of(error)
    headers = {}
    if error.retry_after_s > 0:
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after_s)))
    body: dict[str, object] = {"code": str(error.code), "message": error.message}
    if path.startswith(OPENAI_PREFIXES):
        body = {
            "error": {
                "message": error.message,
                # OpenAI's two kinds: the request's fault or the server's.
                "type": "server_error" if status >= 500 else "invalid_request_error",
                "code": str(error.code),
                "param": _field_of(error.message),
            }
        }
    return JSONResponse(body, status_code=status, headers=headers)


def _field_of(message: str) -> str | None:
    """The field a mesh error message names (messages start `field: ...`)."""
    head, sep, _ = message.partition(":")
    return head if sep and head.replace("_", "").replace(".", "").isalnum() else None


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
        response = error_response(MeshError(str(exc.detail), code=code), request.url.path)
        response.status_code = exc.status_code
        return response

    app.add_exception_handler(MeshError, mesh_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
