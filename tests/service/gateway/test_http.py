"""The gateway's HTTP face over real HTTP: jobs, server-sent events with resume, results with
Range, models, health, OpenAPI, bearer keys, every error status, CORS."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io

import httpx
import pytest
from PIL import Image
from prometheus_client import REGISTRY

from mediamesh.common.errors import StartupError
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import GatewaySettings, MeshConfig
from mediamesh.gateway.http import jobs
from mediamesh.gateway.http.event_ids import parse_event_id
from mediamesh.gateway.main import start_gateway
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A, KEY_B
from tests.service.gateway.http_support import (
    KEY_SLOW,
    MAX_BODY,
    PAGE_ORIGIN,
    base_url,
    bearer,
    frames,
    http_mesh,  # noqa: F401 (a fixture)
    read_events,
    scheduler_calls,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
PNG = b"\x89PNG\r\n\x1a\n"


async def submit(client: httpx.AsyncClient, key: str = KEY_A, **fields: object) -> dict:
    response = await client.post("/v1/jobs", json=fields, headers=bearer(key))
    assert response.status_code == 202, response.text
    return response.json()


async def test_health_readiness_openapi_and_an_offline_docs_page(client):
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).status_code == 200
    document = (await client.get("/openapi.json")).json()
    for path in ("/v1/jobs", "/v1/jobs/{job_id}/events", "/v1/jobs/{job_id}/result", "/v1/models"):
        assert path in document["paths"], path
    request_schema = document["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]
    assert request_schema["application/json"]["schema"]["properties"]["image"]["format"] == "byte"
    docs = await client.get("/docs")
    assert docs.status_code == 200 and "/openapi.json" in docs.text
    assert "<script src" not in docs.text and "cdn" not in docs.text.lower()


async def test_models_in_openai_list_shape_with_the_mesh_fields(client):
    response = await client.get("/v1/models", headers=bearer(KEY_A))
    models = {m["id"]: m for m in response.json()["data"]}
    assert response.json()["object"] == "list"
    assert models["flux-tiny"]["modality"] == "image"
    assert models["flux-tiny"]["limits"]["max_steps"] > 0
    assert models["wan-tiny"]["ready"] is True


async def test_a_job_streams_queued_progress_with_previews_and_its_result(client):
    job = await submit(
        client, model="flux-tiny", prompt="a red fox", steps=3, preview_every_steps=1
    )
    assert job["state"] in ("QUEUED", "DISPATCHED", "RUNNING")
    assert job["links"]["events"] == f"/v1/jobs/{job['job_id']}/events"
    events = await read_events(client, job["job_id"], KEY_A)
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "result" and events[-1]["id"] == "end"
    progress = [e["data"] for e in events if e["event"] == "progress"]
    assert [p["step"] for p in progress] == sorted(p["step"] for p in progress)
    assert progress and progress[-1]["total_steps"] == 3
    previews = [p["preview"] for p in progress if p["preview"]]
    assert previews, "flux-tiny with preview_every_steps=1 sends previews"
    assert base64.b64decode(previews[0]["data"]) and previews[0]["mime_type"].startswith("image/")
    result = events[-1]["data"]
    assert result["mime_type"] == "image/png"
    fetched = await client.get(result["url"], headers=bearer(KEY_A))
    assert fetched.status_code == 200 and fetched.content.startswith(PNG)
    assert fetched.headers["content-type"] == "image/png"
    assert fetched.headers["accept-ranges"] == "bytes"
    info = (await client.get(f"/v1/jobs/{job['job_id']}", headers=bearer(KEY_A))).json()
    assert info["state"] == "SUCCEEDED"
    assert info["result"]["sha256"] == hashlib.sha256(fetched.content).hexdigest()
    assert info["result"]["size_bytes"] == len(fetched.content)
    # The stream's result event names the same bytes as the job does.
    assert result["sha256"] == info["result"]["sha256"]
    assert result["size_bytes"] == len(fetched.content)


async def test_result_ranges(client):
    job = await submit(client, model="echo", prompt="ranges", steps=1)
    await read_events(client, job["job_id"], KEY_A)
    path = f"/v1/jobs/{job['job_id']}/result"
    whole = (await client.get(path, headers=bearer(KEY_A))).content
    total = len(whole)
    head = await client.get(path, headers={**bearer(KEY_A), "Range": "bytes=0-9"})
    assert head.status_code == 206 and head.content == whole[:10]
    assert head.headers["content-range"] == f"bytes 0-9/{total}"
    tail = await client.get(path, headers={**bearer(KEY_A), "Range": "bytes=-7"})
    assert tail.status_code == 206 and tail.content == whole[-7:]
    middle = await client.get(path, headers={**bearer(KEY_A), "Range": f"bytes=5-{total + 50}"})
    assert middle.content == whole[5:]
    # Every 416 names the whole length (RFC 9110), at the end and past it (which the
    # scheduler's Download refuses, so the length has to come from elsewhere).
    for first in (total, total + 1, 999_999):
        outside = await client.get(path, headers={**bearer(KEY_A), "Range": f"bytes={first}-"})
        assert outside.status_code == 416, first
        assert outside.headers["content-range"] == f"bytes */{total}", first


async def test_a_reconnect_with_last_event_id_resumes_on_another_replica_without_repeats(
    client,
    http_mesh: InProcessMesh,  # noqa: F811
):
    job = await submit(client, model="flux-tiny", prompt="resume", steps=8)
    job_id = job["job_id"]
    seen: list[dict] = []
    async with client.stream("GET", f"/v1/jobs/{job_id}/events", headers=bearer(KEY_A)) as response:
        async for frame in frames(response):
            seen.append(frame)
            if frame["event"] == "progress" or frame["id"] == "end":
                break  # drop the connection mid-job
    last = seen[-1]["id"]
    # A second gateway replica over the same scheduler, as behind a load balancer.
    g = http_mesh.config.gateway.model_copy(update={"port": 0, "http_port": 0})
    replica = await start_gateway(MeshConfig(gateway=g, workers=[]), load_registry())
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{replica.http_port}", timeout=120
        ) as other:
            rest = await read_events(other, job_id, KEY_A, last_event_id=last)
            after_end = await other.get(
                f"/v1/jobs/{job_id}/events", headers={**bearer(KEY_A), "Last-Event-ID": "end"}
            )
    finally:
        await replica.stop(0)
    ids = [f["id"] for f in seen + rest]
    assert len(ids) == len(set(ids)), f"repeated events: {ids}"
    assert rest and rest[-1]["event"] == "result"
    # Nothing follows the last event: 204, which stops an EventSource from reconnecting.
    assert after_end.status_code == 204 and after_end.content == b"", after_end.text
    if last != "end":
        keys = [parse_event_id(i) for i in ids]
        assert keys == sorted(keys)


async def test_a_submitted_job_is_answered_from_submit_alone_as_get_job_shows_it(client):
    fox = {"model": "echo", "prompt": "one call", "steps": 1, "seed": 5, "idempotency_key": "k1"}
    get_jobs = scheduler_calls("GetJob")
    job = await submit(client, **fox)
    assert scheduler_calls("GetJob") == get_jobs, "Submit's answer names the whole job"
    assert job["deduplicated"] is False
    assert (job["prompt"], job["steps"], job["seed"]) == ("one call", 1, "5")
    events = await read_events(client, job["job_id"], KEY_A)
    assert events[-1]["event"] == "result"
    shown = (await client.get(f"/v1/jobs/{job['job_id']}", headers=bearer(KEY_A))).json()
    # The same key again: the earlier job, ended now, as GetJob shows it (its result too).
    again = await submit(client, **fox)
    assert again["deduplicated"] is True
    del again["deduplicated"], shown["deduplicated"]
    assert again == shown


async def test_a_submitted_form_is_a_job(client):
    fields = {"model": "echo", "prompt": "from a form", "steps": "1", "seed": "7"}
    # multipart/form-data as a page with an image input left empty sends it: a part with an
    # empty file name and no bytes, which is no image (httpx would leave the name out, so
    # the body is spelled here). Then a urlencoded form.
    parts = [f'name="{name}"\r\n\r\n{value}' for name, value in fields.items()]
    parts.append('name="image"; filename=""\r\ncontent-type: application/octet-stream\r\n\r\n')
    body = "".join(f"--b0\r\ncontent-disposition: form-data; {part}\r\n" for part in parts)
    multipart = await client.post(
        "/v1/jobs",
        content=(body + "--b0--\r\n").encode(),
        headers={**bearer(KEY_A), "content-type": "multipart/form-data; boundary=b0"},
    )
    urlencoded = await client.post("/v1/jobs", data=fields, headers=bearer(KEY_A))
    for response in (multipart, urlencoded):
        assert response.status_code == 202, response.text
        job = response.json()
        assert job["seed"] == "7"
        events = await read_events(client, job["job_id"], KEY_A)
        assert events[-1]["event"] == "result"
    bad = await client.post(
        "/v1/jobs",
        data={"model": "echo", "prompt": "x"},
        files={"prompt_file": ("p.txt", b"hello", "text/plain")},
        headers=bearer(KEY_A),
    )
    assert bad.status_code == 400 and bad.json()["message"].startswith("prompt_file:")
    not_a_file = await client.post(
        "/v1/jobs",
        data={"model": "echo"},
        files={"prompt": ("p.txt", b"hello", "text/plain")},
        headers=bearer(KEY_A),
    )
    assert not_a_file.status_code == 400 and not_a_file.json()["message"].startswith("prompt:")


async def test_cancel_ends_a_running_job_as_cancelled(client):
    job = await submit(client, model="flux-tiny", prompt="long", steps=50)
    cancelled = await client.delete(f"/v1/jobs/{job['job_id']}", headers=bearer(KEY_A))
    assert cancelled.status_code == 200
    events = await read_events(client, job["job_id"], KEY_A)
    assert events[-1]["event"] == "error" and events[-1]["data"]["code"] == "CANCELLED"
    info = (await client.get(f"/v1/jobs/{job['job_id']}", headers=bearer(KEY_A))).json()
    assert info["state"] == "CANCELLED"


async def test_delete_record_deletes_an_ended_job_and_refuses_one_still_running(client):
    done = await submit(client, model="echo", prompt="to delete", steps=1)
    job_id = done["job_id"]
    await read_events(client, job_id, KEY_A)
    job = (await client.get(f"/v1/jobs/{job_id}", headers=bearer(KEY_A))).json()
    theirs = await client.delete(f"/v1/jobs/{job_id}/record", headers=bearer(KEY_B))
    assert theirs.status_code == 404 and theirs.json()["code"] == "NOT_FOUND", theirs.text
    deleted = await client.delete(f"/v1/jobs/{job_id}/record", headers=bearer(KEY_A))
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {
        "job_id": job_id,
        "state": "SUCCEEDED",
        "result_bytes": job["result"]["size_bytes"],
        "deleted": True,
    }
    for method, path in (
        ("GET", f"/v1/jobs/{job_id}"),
        ("GET", f"/v1/jobs/{job_id}/result"),
        ("GET", f"/v1/jobs/{job_id}/events"),
        ("DELETE", f"/v1/jobs/{job_id}/record"),
    ):
        gone = await client.request(method, path, headers=bearer(KEY_A))
        assert gone.status_code == 404, (path, gone.text)
    listed = (await client.get("/v1/jobs", headers=bearer(KEY_A))).json()["data"]
    assert job_id not in [job["job_id"] for job in listed]

    running = (await submit(client, model="flux-tiny", prompt="long", steps=50))["job_id"]
    refused = await client.delete(f"/v1/jobs/{running}/record", headers=bearer(KEY_A))
    assert refused.status_code == 409, refused.text
    error = refused.json()
    assert error["code"] == "FAILED_PRECONDITION" and error["message"].startswith("job_id: ")
    assert running in error["message"] and "cancel" in error["message"]
    # DELETE of the job itself still cancels it; its record can go then.
    await client.delete(f"/v1/jobs/{running}", headers=bearer(KEY_A))
    cancelled = await client.delete(f"/v1/jobs/{running}/record", headers=bearer(KEY_A))
    assert cancelled.status_code == 200, cancelled.text
    assert (cancelled.json()["state"], cancelled.json()["result_bytes"]) == ("CANCELLED", 0)

    document = (await client.get("/openapi.json")).json()
    route = document["paths"]["/v1/jobs/{job_id}/record"]["delete"]
    assert {"200", "404", "409"} <= set(route["responses"])
    schema = route["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["$ref"].endswith("/DeletedJobView")


async def test_error_statuses_and_bodies(client):
    def check(response: httpx.Response, status: int, code: str, field: str | None = None):
        assert response.status_code == status, response.text
        body = response.json()
        assert body["code"] == code and body["message"]
        if field is not None:
            assert body["message"].startswith(f"{field}:"), body["message"]

    fox = {"model": "flux-tiny", "prompt": "fox", "steps": 1}
    check(await client.post("/v1/jobs", json=fox), 401, "UNAUTHENTICATED")
    check(await client.post("/v1/jobs", json=fox, headers=bearer("nope")), 401, "UNAUTHENTICATED")
    # The listing is OpenAI's: its errors come in OpenAI's shape, as /v1/models/{id}'s do.
    listing = await client.get("/v1/models", headers={"Authorization": "Basic x"})
    assert listing.status_code == 401, listing.text
    assert listing.json()["error"]["code"] == "UNAUTHENTICATED"
    check(
        await client.post("/v1/jobs", json=fox, headers=bearer(KEY_B)),
        403,
        "PERMISSION_DENIED",
        "model",
    )
    check(
        await client.post("/v1/jobs", json={**fox, "steps": 999}, headers=bearer(KEY_A)),
        400, "INVALID_ARGUMENT", "steps",
    )  # fmt: skip
    check(
        await client.post("/v1/jobs", json={**fox, "colour": "red"}, headers=bearer(KEY_A)),
        400, "INVALID_ARGUMENT", "colour",
    )  # fmt: skip
    check(
        await client.post("/v1/jobs", content=b"{not json", headers=bearer(KEY_A)),
        400, "INVALID_ARGUMENT", "body",
    )  # fmt: skip
    check(
        await client.post("/v1/jobs", json={**fox, "model": "nope"}, headers=bearer(KEY_A)),
        404,
        "NOT_FOUND",
        "model",
    )
    big = {**fox, "prompt": "x" * (MAX_BODY + 1)}
    check(
        await client.post("/v1/jobs", json=big, headers=bearer(KEY_A)),
        413,
        "RESOURCE_EXHAUSTED",
        "body",
    )
    # Another tenant's job is not found, on every route.
    theirs = await submit(client, KEY_A, model="echo", prompt="mine", steps=1)
    job_path = f"/v1/jobs/{theirs['job_id']}"
    for method, path in [
        ("GET", job_path),
        ("DELETE", job_path),
        ("GET", f"{job_path}/events"),
        ("GET", f"{job_path}/result"),
    ]:
        check(await client.request(method, path, headers=bearer(KEY_B)), 404, "NOT_FOUND")
    check(await client.get("/v1/jobs/nope", headers=bearer(KEY_A)), 404, "NOT_FOUND", "job_id")
    bad_resume = await client.get(
        f"{job_path}/events", headers={**bearer(KEY_A), "Last-Event-ID": "x"}
    )
    check(bad_resume, 400, "INVALID_ARGUMENT", "Last-Event-ID")
    # The slow tenant's burst is one job: the second waits, told how long.
    await submit(client, KEY_SLOW, model="echo", prompt="first", steps=1)
    limited = await client.post(
        "/v1/jobs", json={"model": "echo", "prompt": "second", "steps": 1}, headers=bearer(KEY_SLOW)
    )
    check(limited, 429, "RESOURCE_EXHAUSTED", "rate")
    assert int(limited.headers["retry-after"]) >= 1


async def test_cors_lets_the_configured_origin_call_with_a_key(client):
    preflight = await client.options(
        "/v1/jobs",
        headers={
            "Origin": PAGE_ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == PAGE_ORIGIN
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    other = await client.options(
        "/v1/jobs",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in other.headers
    simple = await client.get("/v1/models", headers={**bearer(KEY_A), "Origin": PAGE_ORIGIN})
    assert simple.headers["access-control-allow-origin"] == PAGE_ORIGIN


async def test_a_write_from_another_site_is_refused_before_any_job(client, http_mesh):  # noqa: F811
    before = len(http_mesh.core.jobs)
    form = {"model": "echo", "prompt": "x", "steps": "1"}
    for origin in ("http://evil.example", "null"):
        # A form post is what any page can make a browser send without a preflight.
        refused = await client.post(
            "/v1/jobs", data=form, headers={**bearer(KEY_A), "Origin": origin}
        )
        assert refused.status_code == 403, refused.text
        assert refused.json()["code"] == "PERMISSION_DENIED"
        assert refused.json()["message"].startswith(f"origin: requests from {origin} may not")
    openai = await client.post(
        "/v1/images/generations",
        json={"model": "flux-tiny", "prompt": "x"},
        headers={**bearer(KEY_A), "Origin": "http://evil.example"},
    )
    assert openai.status_code == 403 and openai.json()["error"]["param"] == "origin"
    assert len(http_mesh.core.jobs) == before
    # The gateway's own page, a configured origin and clients that send no Origin may.
    for origin in (base_url(http_mesh), PAGE_ORIGIN, None):
        headers = {**bearer(KEY_A), **({"Origin": origin} if origin else {})}
        accepted = await client.post("/v1/jobs", data=form, headers=headers)
        assert accepted.status_code == 202, (origin, accepted.text)
    read = await client.get("/v1/models", headers={**bearer(KEY_A), "Origin": "http://x.example"})
    assert read.status_code == 200


async def test_a_gateway_without_its_scheduler_is_not_ready_and_answers_503(unused_tcp_port):
    config = MeshConfig(
        gateway=GatewaySettings(
            port=0,
            metrics_port=None,
            http_port=0,
            scheduler_address=f"127.0.0.1:{unused_tcp_port}",
            scheduler_lost_after_s=0.3,
        ),
        workers=[],
    )
    gateway = await start_gateway(config, load_registry())
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{gateway.http_port}", timeout=30
        ) as client:
            for _ in range(100):
                if (await client.get("/readyz")).status_code == 503:
                    break
                await asyncio.sleep(0.1)
            assert (await client.get("/readyz")).status_code == 503
            response = await client.post("/v1/jobs", json={"model": "echo", "prompt": "x"})
            assert response.status_code == 503 and response.json()["code"] == "UNAVAILABLE"
    finally:
        await gateway.stop(0)


async def test_a_quiet_stream_sends_keepalive_comments(client, monkeypatch):
    monkeypatch.setattr(jobs, "KEEPALIVE_S", 0.01)
    job = await submit(client, model="flux-tiny", prompt="slow enough", steps=2)
    path = f"/v1/jobs/{job['job_id']}/events"
    async with client.stream("GET", path, headers=bearer(KEY_A)) as response:
        lines = [line async for line in response.aiter_lines()]
    assert ": keepalive" in lines
    assert "event: result" in lines


async def test_an_http_port_in_use_stops_the_gateway_with_one_clear_error(
    http_mesh: InProcessMesh,  # noqa: F811
):
    taken = http_mesh.gateway.http_port
    g = http_mesh.config.gateway.model_copy(update={"port": 0, "http_port": taken})
    with pytest.raises(
        StartupError,
        match=f"^gateway.http_port: cannot listen on 127.0.0.1:{taken}: address already in use$",
    ):
        await start_gateway(MeshConfig(gateway=g, workers=[]), load_registry())


async def test_an_image_input_as_a_file_part_or_as_base64_json(client):
    picture = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 30, 30)).save(picture, "PNG")
    fields = {"model": "flux-img2img-tiny", "prompt": "make it blue", "steps": "2"}
    as_file = await client.post(
        "/v1/jobs",
        data=fields,
        files={"image": ("in.png", picture.getvalue(), "image/png")},
        headers=bearer(KEY_A),
    )
    as_json = await client.post(
        "/v1/jobs",
        json={**fields, "steps": 2, "image": base64.b64encode(picture.getvalue()).decode()},
        headers=bearer(KEY_A),
    )
    for response in (as_file, as_json):
        assert response.status_code == 202, response.text
        events = await read_events(client, response.json()["job_id"], KEY_A)
        assert events[-1]["event"] == "result", events[-1]
    no_image = await client.post("/v1/jobs", data=fields, headers=bearer(KEY_A))
    assert no_image.status_code == 400 and no_image.json()["message"].startswith("image")


def http_count(route: str, method: str, status: int) -> float:
    labels = {"route": route, "method": method, "status": str(status)}
    return REGISTRY.get_sample_value("mediamesh_http_requests_total", labels) or 0.0


async def test_http_requests_are_counted_by_route_template_method_and_status(client):
    cases = [
        ("/v1/models", "GET", 200, client.get("/v1/models", headers=bearer(KEY_A))),
        ("/v1/jobs/{job_id}", "GET", 404, client.get("/v1/jobs/j-x", headers=bearer(KEY_A))),
        ("unmatched", "GET", 404, client.get("/no/such/route")),
        (
            "/v1/jobs",
            "POST",
            403,
            client.post("/v1/jobs", data={"prompt": "x"}, headers={"Origin": "http://x.example"}),
        ),
    ]
    for route, method, status, call in cases:
        before = http_count(route, method, status)
        response = await call
        assert response.status_code == status, (route, response.text)
        assert http_count(route, method, status) == before + 1, route
    timed = {"route": "/v1/models", "method": "GET"}
    assert REGISTRY.get_sample_value("mediamesh_http_request_seconds_count", timed)
