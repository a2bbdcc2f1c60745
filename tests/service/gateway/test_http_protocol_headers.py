"""What HTTP itself asks of the gateway's answers: `Allow` on a 405, a `Bearer` challenge on
a 401, `Retry-After` on a 503, HEAD on the page, 204 for an event stream resumed after its
last event, CORS preflights for HEAD and the trace context, and `nosniff` and no framing on
every answer."""

from __future__ import annotations

import httpx
import pytest

from mediamesh.common.errors import Unavailable
from mediamesh.gateway.api.json_plane import JsonPlane
from mediamesh.gateway.http.app import create_app
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A, KEY_B
from tests.service.gateway.http_support import (
    MAX_BODY,
    PAGE_ORIGIN,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
    read_events,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


def plane_of(mesh: InProcessMesh) -> JsonPlane:
    """The JsonPlane the mesh's HTTP face serves."""
    assert mesh.gateway.http is not None
    plane: JsonPlane = mesh.gateway.http.server.config.app.state.context.plane
    return plane


async def finished_job(client: httpx.AsyncClient) -> str:
    made = await client.post(
        "/v1/jobs", json={"model": "echo", "prompt": "headers", "steps": 1}, headers=bearer(KEY_A)
    )
    await read_events(client, made.json()["job_id"], KEY_A)
    return str(made.json()["job_id"])


async def test_a_405_names_the_methods_the_path_takes(client: httpx.AsyncClient) -> None:
    answer = await client.put("/v1/jobs", headers=bearer(KEY_A))
    assert answer.status_code == 405
    assert set(answer.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}


@pytest.mark.parametrize("path", ["/v1/models", "/v1/jobs", "/v1/videos"])
async def test_a_401_challenges_for_a_bearer_key(client: httpx.AsyncClient, path: str) -> None:
    for headers in ({}, bearer("not-a-key")):
        answer = await client.get(path, headers=headers)
        assert answer.status_code == 401, answer.text
        assert answer.headers["www-authenticate"].startswith("Bearer"), answer.headers


async def test_an_unavailable_mesh_asks_for_a_short_wait(
    http_mesh: InProcessMesh,  # noqa: F811
    client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def unreachable(plane: JsonPlane) -> list:
        raise Unavailable("the scheduler is unreachable; retry")

    monkeypatch.setattr(JsonPlane, "models", unreachable)
    for path in ("/v1/models", "/v1/models/echo"):
        answer = await client.get(path, headers=bearer(KEY_A))
        assert answer.status_code == 503, answer.text
        assert answer.headers["retry-after"] == "2"
    # A readiness probe (or a balancer) is told the same.
    app = create_app(plane_of(http_mesh), ready=lambda: False, max_body_bytes=MAX_BODY)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as direct:
        probe = await direct.get("/readyz")
    assert probe.status_code == 503 and probe.headers["retry-after"] == "2"


async def test_the_page_answers_head(client: httpx.AsyncClient) -> None:
    for path in ("/", "/web/app.js"):
        answer = await client.head(path)
        assert answer.status_code == 200, path
        assert answer.content == b"" and int(answer.headers["content-length"]) > 0


async def test_resuming_after_the_last_event_is_204_for_the_owner_only(
    client: httpx.AsyncClient,
) -> None:
    job_id = await finished_job(client)
    path = f"/v1/jobs/{job_id}/events"
    done = await client.get(path, headers={**bearer(KEY_A), "Last-Event-ID": "end"})
    assert done.status_code == 204 and done.content == b""
    foreign = await client.get(path, headers={**bearer(KEY_B), "Last-Event-ID": "end"})
    assert foreign.status_code == 404


async def test_a_preflight_admits_head_and_the_trace_context(client: httpx.AsyncClient) -> None:
    job_id = await finished_job(client)
    head = await client.options(
        f"/v1/jobs/{job_id}/result",
        headers={
            "Origin": PAGE_ORIGIN,
            "Access-Control-Request-Method": "HEAD",
            "Access-Control-Request-Headers": "authorization,if-none-match",
        },
    )
    assert head.status_code == 200, head.text
    assert "HEAD" in head.headers["access-control-allow-methods"]
    traced = await client.options(
        "/v1/jobs",
        headers={
            "Origin": PAGE_ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,traceparent,tracestate",
        },
    )
    assert traced.status_code == 200, traced.text
    allowed = traced.headers["access-control-allow-headers"].lower()
    assert "traceparent" in allowed and "tracestate" in allowed


async def test_every_answer_forbids_sniffing_and_framing(client: httpx.AsyncClient) -> None:
    job_id = await finished_job(client)
    answers = [
        await client.get("/v1/models", headers=bearer(KEY_A)),
        await client.get("/v1/jobs/nope", headers=bearer(KEY_A)),
        await client.get("/v1/models"),
        await client.get("/docs"),
        await client.get("/openapi.json"),
        await client.get("/healthz"),
        await client.get(f"/v1/jobs/{job_id}/result", headers=bearer(KEY_A)),
        await client.put("/v1/jobs"),
        await client.options(
            "/v1/jobs", headers={"Origin": PAGE_ORIGIN, "Access-Control-Request-Method": "POST"}
        ),
    ]
    for answer in answers:
        where = (answer.request.method, answer.request.url.path, answer.status_code)
        assert answer.headers["x-content-type-options"] == "nosniff", where
        assert answer.headers["x-frame-options"] == "DENY", where
        assert "frame-ancestors 'none'" in answer.headers["content-security-policy"], where
    # The page keeps its own, stricter policy.
    page = await client.get("/")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
