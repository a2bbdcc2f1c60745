"""How the HTTP face answers three cases: errors of /v1/models in OpenAI's shape, as those of
/v1/models/{id}; a timeout_ms too short for its job as the request's fault, not a 504 to
retry; a client that leaves before its body is whole as 499, never a 500 with a traceback."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from starlette.requests import Request

from mediamesh.common.errors import MeshError, StatusCode, Unauthenticated
from mediamesh.gateway.http.bodies import read_body
from mediamesh.gateway.http.errors import error_response
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import HTTP_GATEWAY

TOO_SHORT = (
    "timeout_ms: 0.001 s left, and this job needs at least 0.050 s on a free device; "
    "give it more time"
)


def body_of(answer: object) -> dict:
    return json.loads(bytes(answer.body))  # type: ignore[attr-defined]


def test_the_models_listing_answers_errors_in_openais_shape() -> None:
    for path in ("/v1/models", "/v1/models/flux-tiny"):
        error = body_of(error_response(Unauthenticated("authorization: missing"), path))
        assert error["error"]["code"] == "UNAUTHENTICATED", path
        assert error["error"]["type"] == "invalid_request_error", path
    # Paths that only start with the listing's are not OpenAI's.
    for path in ("/v1/modelsx", "/v1/models-admin", "/v1/jobs"):
        error = body_of(error_response(Unauthenticated("authorization: missing"), path))
        assert error == {"code": "UNAUTHENTICATED", "message": "authorization: missing"}, path


def test_a_timeout_too_short_for_its_job_is_a_400_no_retry_can_pass() -> None:
    refused = MeshError(TOO_SHORT, code=StatusCode.DEADLINE_EXCEEDED)
    for path in ("/v1/jobs", "/v1/images/generations"):
        answer = error_response(refused, path)
        assert answer.status_code == 400, path
        assert answer.headers["x-should-retry"] == "false", path
    error = body_of(error_response(refused, "/v1/videos"))["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        "timeout_ms",
        "DEADLINE_EXCEEDED",
    )
    # The gateway's own call to the scheduler running out is the server's: 504, retried.
    upstream = error_response(
        MeshError("Deadline Exceeded", code=StatusCode.DEADLINE_EXCEEDED), "/v1/jobs"
    )
    assert upstream.status_code == 504 and "x-should-retry" not in upstream.headers


async def test_a_client_that_leaves_mid_body_is_cancelled_not_a_server_error() -> None:
    pieces = [{"type": "http.request", "body": b'{"model": ', "more_body": True}]

    async def receive() -> dict:
        return pieces.pop(0) if pieces else {"type": "http.disconnect"}

    headers = [(b"content-type", b"application/json"), (b"content-length", b"1000")]
    scope = {"type": "http", "method": "POST", "path": "/", "query_string": b"", "headers": headers}
    with pytest.raises(MeshError) as caught:
        await read_body(Request(scope, receive), 1 << 20)
    assert caught.value.code is StatusCode.CANCELLED
    assert caught.value.message == "body: the client closed the connection after 10 bytes of it"
    assert error_response(caught.value, "/v1/jobs").status_code == 499


def http_requests(route: str, status: str) -> float:
    labels = {"route": route, "method": "POST", "status": status}
    return REGISTRY.get_sample_value("mediamesh_http_requests_total", labels) or 0.0


async def leave_mid_body(port: int, path: str) -> None:
    """A POST that declares 1000 bytes, sends 10 and closes its connection."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {KEY_A}\r\n"
        "content-type: application/json\r\ncontent-length: 1000\r\n\r\n"
    )
    writer.write(head.encode() + b'{"model": ')
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.close()
    await writer.wait_closed()


async def test_a_client_that_leaves_mid_upload_counts_as_499_without_a_traceback(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Echo alone is enough: no body is ever read whole.
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], gateway=HTTP_GATEWAY)
    try:
        routes = ("/v1/jobs", "/v1/images/generations", "/v1/audio/generate")
        before = {r: (http_requests(r, "499"), http_requests(r, "500")) for r in routes}
        caplog.set_level(logging.ERROR)
        for route in routes:
            await leave_mid_body(mesh.gateway.http_port, route)
        for _ in range(50):
            if all(http_requests(route, "499") > before[route][0] for route in routes):
                break
            await asyncio.sleep(0.1)
        for route in routes:
            assert http_requests(route, "499") == before[route][0] + 1, route
            assert http_requests(route, "500") == before[route][1], route
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    finally:
        await stop_mesh(mesh)
