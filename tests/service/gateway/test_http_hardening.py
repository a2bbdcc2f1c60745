"""The HTTP face against what any caller can send: bodies read only after the key and within
the limit, a request's jobs admitted together, DNS-rebound requests to a keyless gateway,
methods that would mint metric series, and HEAD on results."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from prometheus_client import REGISTRY

from mediamesh.common.errors import ResourceExhausted
from mediamesh.gateway.api.json_plane import Followed, JsonPlane
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    KEY_THREE,
    MAX_BODY,
    PAGE_ORIGIN,
    base_url,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
    png_bytes,
    read_events,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
GENERATIONS = "/v1/images/generations"


async def answer_to_headers(port: int, path: str, headers: dict[str, str]) -> str:
    """The status line the gateway answers with after only the request's head (and one byte
    of a body that the head says is far longer); '' if it waits for the rest instead."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}\r\n{{".encode())
    await writer.drain()
    try:
        return (await asyncio.wait_for(reader.readline(), 5)).decode().strip()
    except TimeoutError:
        return ""
    finally:
        writer.close()


async def test_an_images_body_is_read_only_after_the_key_and_only_within_the_limit(
    http_mesh: InProcessMesh,  # noqa: F811
    client: httpx.AsyncClient,
) -> None:
    port = http_mesh.gateway.http_port
    json_head = {"Content-Type": "application/json", "Content-Length": str(50_000_000)}
    # 50 MB announced, one byte sent: the answer comes without waiting for the rest.
    assert await answer_to_headers(port, GENERATIONS, json_head) == "HTTP/1.1 401 Unauthorized"
    keyed = {**json_head, **bearer(KEY_A)}
    assert (
        await answer_to_headers(port, GENERATIONS, keyed) == "HTTP/1.1 413 Request Entity Too Large"
    )

    async def oversized() -> AsyncIterator[bytes]:
        # No Content-Length (chunked): the limit holds while reading, too.
        yield b'{"model": "echo", "prompt": "'
        for _ in range(MAX_BODY // 65536 + 1):
            yield b"x" * 65536
        yield b'"}'

    too_big = await client.post(GENERATIONS, content=oversized(), headers=keyed_json())
    assert too_big.status_code == 413, too_big.text
    error = too_big.json()["error"]
    assert error["param"] == "body" and f"limit of {MAX_BODY} bytes" in error["message"]
    # Read by hand, the body is still validated by its model, and still documented.
    bad_n = await client.post(
        GENERATIONS, json={"model": "echo", "prompt": "x", "n": 11}, headers=bearer(KEY_A)
    )
    assert bad_n.status_code == 400 and bad_n.json()["error"]["param"] == "n", bad_n.text
    assert "less than or equal to 10" in bad_n.json()["error"]["message"]
    document = (await client.get("/openapi.json")).json()
    body = document["paths"][GENERATIONS]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    assert body["required"] and {"prompt", "n", "size"} <= set(schema["properties"])
    assert schema["required"] == ["prompt"]


def keyed_json(key: str = KEY_A) -> dict[str, str]:
    return {**bearer(key), "Content-Type": "application/json"}


async def test_the_n_jobs_of_an_images_request_are_admitted_together(
    http_mesh: InProcessMesh,  # noqa: F811
    client: httpx.AsyncClient,
) -> None:
    # Tenant "three" may submit three jobs, then one per 100 s.
    before = len(http_mesh.core.jobs)
    two = {"model": "echo", "prompt": "x", "n": 2}
    # Refused as invalid after its admission, a request made no job, so it cost nothing.
    invalid = await client.post(GENERATIONS, json={**two, "n": 3, "steps": 9}, headers=three())
    assert invalid.status_code == 400 and invalid.json()["error"]["param"] == "steps", invalid.text
    made = await client.post(GENERATIONS, json=two, headers=three())
    assert made.status_code == 200 and len(made.json()["data"]) == 2, made.text
    assert len(http_mesh.core.jobs) == before + 2
    # One token is left: two more jobs are refused together, before either starts.
    refused = await client.post(GENERATIONS, json=two, headers=three())
    assert refused.status_code == 429, refused.text
    assert len(http_mesh.core.jobs) == before + 2
    message = refused.json()["error"]["message"]
    assert refused.json()["error"]["param"] == "rate"
    assert "burst 3" in message and "2 jobs at once" in message, message
    edit = await client.post(
        "/v1/images/edits",
        data={"model": "flux-img2img-tiny", "prompt": "x", "n": "2"},
        files={"image": ("in.png", png_bytes(), "image/png")},
        headers=three(),
    )
    assert edit.status_code == 429, edit.text
    # No job of either started: none would ever be answered for.
    assert len(http_mesh.core.jobs) == before + 2


def three() -> dict[str, str]:
    return bearer(KEY_THREE)


async def test_jobs_submitted_before_one_that_fails_are_cancelled(
    http_mesh: InProcessMesh,  # noqa: F811
    client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    follow = JsonPlane.follow
    made: list[str] = []

    async def second_refused(plane: JsonPlane, request: object, caller: object) -> Followed:
        if made:
            raise ResourceExhausted("queue: full (a scheduler's refusal, here made up)")
        followed = await follow(plane, request, caller)  # type: ignore[arg-type]
        made.append(followed.job_id)
        return followed

    monkeypatch.setattr(JsonPlane, "follow", second_refused)
    body = {"model": "flux-tiny", "prompt": "x", "n": 2, "steps": 50}
    refused = await client.post(GENERATIONS, json=body, headers=bearer(KEY_A))
    assert refused.status_code == 429, refused.text
    assert len(made) == 1
    job = (await client.get(f"/v1/jobs/{made[0]}", headers=bearer(KEY_A))).json()
    assert job["state"] == "CANCELLED", job


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def keyless_mesh(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path
) -> AsyncIterator[InProcessMesh]:
    """No API keys, on loopback (open), with the page origin of http_support allowed."""
    mesh = await start_mesh(
        tmp_path_factory.mktemp("keyless"),
        models_dir,
        [["echo"]],
        gateway={"http_port": 0, "http": {"cors_origins": [PAGE_ORIGIN]}},
    )
    yield mesh
    await stop_mesh(mesh)


async def test_a_keyless_gateway_answers_only_requests_to_its_own_names(
    keyless_mesh: InProcessMesh,
) -> None:
    port = keyless_mesh.gateway.http_port
    rebound = f"attacker.example:{port}"
    async with httpx.AsyncClient(base_url=base_url(keyless_mesh), timeout=60) as client:
        job = (await client.post("/v1/jobs", json={"model": "echo", "prompt": "x"})).json()
        await read_events(client, job["job_id"], "none")
        before = len(keyless_mesh.core.jobs)
        # A page whose name now resolves to 127.0.0.1 is same-origin to its browser.
        as_page = {"Host": rebound, "Origin": f"http://{rebound}"}
        write = await client.post(
            "/v1/jobs", json={"model": "echo", "prompt": "x"}, headers=as_page
        )
        assert write.status_code == 403, write.text
        assert write.json()["code"] == "PERMISSION_DENIED"
        assert write.json()["message"].startswith(f"host: '{rebound}' is not a name of this")
        assert len(keyless_mesh.core.jobs) == before
        job_path = f"/v1/jobs/{job['job_id']}"
        for path in (job_path, f"{job_path}/result", f"{job_path}/events", "/v1/models", "/"):
            read = await client.get(path, headers=as_page)
            assert read.status_code == 403, (path, read.text)
        openai = await client.get(f"/v1/videos/{job['job_id']}/content", headers=as_page)
        assert openai.status_code == 403 and openai.json()["error"]["param"] == "host"
        for host in ("localhost", "127.0.0.1", "[::1]", "127.0.0.2", "page.example"):
            for named in (host, f"{host}:{port}"):
                fine = await client.get(f"{job_path}/result", headers={"Host": named})
                assert fine.status_code == 200, (named, fine.text)
        local = {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"}
        accepted = await client.post(
            "/v1/jobs", json={"model": "echo", "prompt": "x"}, headers=local
        )
        assert accepted.status_code == 202, accepted.text


async def test_a_gateway_with_keys_answers_any_host_that_brings_a_key(
    client: httpx.AsyncClient,
) -> None:
    # A rebound page has no key to send; checking names would only refuse proxies' names.
    rebound = {"Host": "gateway.example:443", **bearer(KEY_A)}
    job = await client.post("/v1/jobs", json={"model": "echo", "prompt": "x"}, headers=rebound)
    assert job.status_code == 202, job.text
    assert (await client.get("/v1/models", headers=rebound)).status_code == 200


def http_count(method: str) -> float:
    total = 0.0
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if sample.name == "mediamesh_http_requests_total" and sample.labels["method"] == method:
                total += sample.value
    return total


async def test_an_unknown_method_is_counted_as_other(client: httpx.AsyncClient) -> None:
    before = http_count("other")
    for method in ("FOO1", "FOO2", "PROPFIND"):
        answer = await client.request(method, "/v1/models", headers=bearer(KEY_A))
        assert answer.status_code == 405, (method, answer.text)
    assert http_count("other") == before + 3
    assert http_count("FOO1") == http_count("FOO2") == http_count("PROPFIND") == 0


async def test_head_of_a_result_answers_the_headers_of_its_get(client: httpx.AsyncClient) -> None:
    paths = []
    # The videos route serves only video models' jobs.
    for request, route in (
        ({"model": "echo", "prompt": "x"}, "/v1/jobs/{}/result"),
        (
            {"model": "wan-tiny", "prompt": "x", "steps": 1, "num_frames": 5},
            "/v1/videos/{}/content",
        ),
    ):
        job = await client.post("/v1/jobs", json=request, headers=bearer(KEY_A))
        job_id = job.json()["job_id"]
        await read_events(client, job_id, KEY_A)
        paths.append(route.format(job_id))
    for path in paths:
        for wanted in ({}, {"Range": "bytes=2-9"}, {"Range": "bytes=-5"}):
            headers = {**bearer(KEY_A), **wanted}
            got = await client.get(path, headers=headers)
            head = await client.head(path, headers=headers)
            assert head.status_code == got.status_code in (200, 206), (path, wanted, head)
            assert head.content == b""
            for name in (
                "content-type",
                "content-length",
                "content-range",
                "etag",
                "accept-ranges",
            ):
                assert head.headers.get(name) == got.headers.get(name), (path, wanted, name)
            assert int(head.headers["content-length"]) == len(got.content)
        outside = await client.head(path, headers={**bearer(KEY_A), "Range": "bytes=99999-"})
        assert outside.status_code == 416 and outside.headers["content-range"].startswith(
            "bytes */"
        )
    missing = await client.head("/v1/jobs/j-none/result", headers=bearer(KEY_A))
    assert missing.status_code == 404
