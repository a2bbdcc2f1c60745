"""The HTTP face over a mesh that keeps results in S3 (moto's S3 server on loopback) and
calls webhooks back (a receiver on loopback): presigned result URLs on the native and the
OpenAI-compatible routes, the result endpoint streaming from the bucket with ranges,
queued-with-ETA and notice events on the event stream, and a webhook given in a JSON body."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import openai
import pytest
import pytest_asyncio
from PIL import Image

from mediamesh.common.webhook_signing import verify
from mediamesh.gateway.core.tenancy import hash_key
from mediamesh.gateway.http.event_ids import parse_event_id
from tests.s3_server import CREDENTIALS, S3Server, s3_server
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import base_url, bearer, read_events
from tests.webhook_receiver import Received, Receiver, webhook_receiver

pytestmark = pytest.mark.asyncio(loop_scope="module")
PNG = b"\x89PNG\r\n\x1a\n"
SECRET = "whsec-http"
PREFIX = "http-results"
# The smallest Download chunk, so that a tiny image spans several ranged reads of the object.
CHUNK = 1024
# How long a BATCH job waits for spot capacity that never comes: long enough to attach to
# its event stream while it is still queued, on a loaded machine too.
SPOT_WAIT_S = 2.5
PLACEMENT = {
    "REALTIME": {"prefer": "on-demand", "allow": ["on-demand"]},
    "STANDARD": {"prefer": "on-demand", "allow": ["on-demand"]},
    "BATCH": {"prefer": "spot", "allow": ["spot", "on-demand"], "fallback_after_s": SPOT_WAIT_S},
}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def receiver() -> AsyncIterator[Receiver]:
    async with webhook_receiver() as r:
        yield r


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def s3_mesh(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path, s3: S3Server, receiver: Receiver
) -> AsyncIterator[InProcessMesh]:
    """flux-tiny and echo on one worker; results in the bucket under PREFIX; the inline limit
    left at its default (4 MiB), so only result_as_url makes these small results URLs."""
    with pytest.MonkeyPatch.context() as env:
        # The scheduler reads the standard AWS variables when it starts.
        for name, value in CREDENTIALS.items():
            env.setenv(name, value)
        mesh = await start_mesh(
            tmp_path_factory.mktemp("http-s3"),
            models_dir,
            [["flux-tiny", "echo"]],
            gateway={
                "http_port": 0,
                "download_chunk_bytes": CHUNK,
                "api_keys": [{"sha256": hash_key(KEY_A), "tenant": "a"}],
            },
            scheduler={"artifacts": s3.artifact_settings(prefix=PREFIX), "placement": PLACEMENT},
            webhooks={
                "allowed_hosts": [f"127.0.0.1:{receiver.port}"],
                "secrets": {"a": SECRET},
                "first_backoff_s": 0.2,
                "max_backoff_s": 0.4,
            },
        )
        yield mesh
        await stop_mesh(mesh)


@pytest_asyncio.fixture(loop_scope="module")
async def client(s3_mesh: InProcessMesh) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url(s3_mesh), timeout=120) as client:
        yield client


async def submit(client: httpx.AsyncClient, **fields: object) -> str:
    response = await client.post("/v1/jobs", json=fields, headers=bearer(KEY_A))
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


async def get_job(client: httpx.AsyncClient, job_id: str) -> dict:
    response = await client.get(f"/v1/jobs/{job_id}", headers=bearer(KEY_A))
    assert response.status_code == 200, response.text
    return response.json()


async def fetch_anonymously(url: str) -> httpx.Response:
    """GET `url` with no API key, as a browser given the link would."""
    async with httpx.AsyncClient(timeout=60) as anonymous:
        return await anonymous.get(url)


def assert_presigned(url: str | None, s3: S3Server) -> None:
    assert url and url.startswith(f"{s3.endpoint}/"), url
    assert "X-Amz-Signature=" in url and "X-Amz-Expires=" in url, url


def local_copies(mesh: InProcessMesh, job_id: str) -> list[Path]:
    """Files of the job's result on the scheduler's disk (there must be none with S3)."""
    return list(Path(mesh.config.scheduler.artifact_dir).rglob(f"{job_id}*"))


async def test_a_result_as_url_job_gets_presigned_urls_on_get_and_in_its_result_event(
    client: httpx.AsyncClient, s3_mesh: InProcessMesh, s3: S3Server
):
    job_id = await submit(
        client,
        model="flux-tiny",
        prompt="a fox in a bucket",
        steps=2,
        width=64,
        height=64,
        seed=3,
        result_as_url=True,
    )
    events = await read_events(client, job_id, KEY_A)
    assert events[-1]["event"] == "result", events[-1]
    streamed = events[-1]["data"]
    assert_presigned(streamed["url"], s3)
    assert streamed["url_expires_unix_ms"] > time.time() * 1000
    info = await get_job(client, job_id)
    assert info["state"] == "SUCCEEDED"
    assert_presigned(info["result"]["url"], s3)
    assert info["result"]["url_expires_unix_ms"] > time.time() * 1000
    for url in (streamed["url"], info["result"]["url"]):
        fetched = await fetch_anonymously(url)
        assert fetched.status_code == 200, fetched.text
        assert fetched.headers["content-type"] == "image/png"
        assert fetched.content.startswith(PNG)
        assert len(fetched.content) == info["result"]["size_bytes"]
        assert hashlib.sha256(fetched.content).hexdigest() == info["result"]["sha256"]
    assert Image.open(io.BytesIO(fetched.content)).size == (64, 64)
    assert f"{PREFIX}/{job_id}.png" in s3.object_keys()
    assert local_copies(s3_mesh, job_id) == []


async def test_the_result_endpoint_streams_the_object_from_s3_whole_and_in_ranges(
    client: httpx.AsyncClient, s3_mesh: InProcessMesh, s3: S3Server
):
    job_id = await submit(
        client, model="flux-tiny", prompt="ranges", steps=2, width=64, height=64, seed=4
    )
    events = await read_events(client, job_id, KEY_A)
    assert events[-1]["event"] == "result", events[-1]
    info = await get_job(client, job_id)
    # No URL was asked for and the image is under the inline limit: the gateway's own
    # endpoint is the result's URL, and it has to read the bytes from the bucket.
    path = f"/v1/jobs/{job_id}/result"
    assert info["result"]["url"].endswith(path)
    assert f"{PREFIX}/{job_id}.png" in s3.object_keys() and local_copies(s3_mesh, job_id) == []

    whole = await client.get(path, headers=bearer(KEY_A))
    assert whole.status_code == 200 and whole.headers["content-type"] == "image/png"
    data = whole.content
    total = len(data)
    assert total == info["result"]["size_bytes"] and total > 3 * CHUNK, total
    assert hashlib.sha256(data).hexdigest() == info["result"]["sha256"]
    assert whole.headers["etag"] == f'"{info["result"]["sha256"]}"'

    async def ranged(header: str) -> httpx.Response:
        return await client.get(path, headers={**bearer(KEY_A), "Range": header})

    # Across two chunk boundaries (1024, 2048): several ranged reads of the object.
    across = await ranged("bytes=1000-2100")
    assert across.status_code == 206 and across.content == data[1000:2101]
    assert across.headers["content-range"] == f"bytes 1000-2100/{total}"
    assert across.headers["content-length"] == "1101"
    tail = await ranged("bytes=-100")
    assert tail.status_code == 206 and tail.content == data[-100:]
    assert tail.headers["content-range"] == f"bytes {total - 100}-{total - 1}/{total}"
    rest = await ranged(f"bytes={CHUNK + 1}-")
    assert rest.status_code == 206 and rest.content == data[CHUNK + 1 :]
    outside = await ranged(f"bytes={total}-")
    assert outside.status_code == 416
    assert outside.headers["content-range"] == f"bytes */{total}"


async def test_openai_images_as_url_are_presigned_links_that_serve_the_image(
    s3_mesh: InProcessMesh, s3: S3Server
):
    client = openai.AsyncOpenAI(base_url=f"{base_url(s3_mesh)}/v1", api_key=KEY_A, max_retries=0)
    try:
        linked = await client.images.generate(
            model="flux-tiny",
            prompt="a red fox",
            size="64x64",
            response_format="url",
            extra_body={"steps": 2, "seed": 5},
        )
    finally:
        await client.close()
    (image,) = linked.data or []
    assert image.b64_json is None
    # An OpenAI client fetches the link without the API key: it must be the bucket's.
    assert_presigned(image.url, s3)
    fetched = await fetch_anonymously(image.url or "")
    assert fetched.status_code == 200, fetched.text
    assert fetched.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(fetched.content)).size == (64, 64)


async def test_a_queued_job_streams_its_eta_then_notices_before_its_result(
    client: httpx.AsyncClient,
):
    # A BATCH job prefers spot workers; this mesh has none, so the job stays queued for
    # SPOT_WAIT_S and then falls back to the on-demand worker, announcing it.
    started = time.monotonic()
    job_id = await submit(client, model="echo", prompt="waits for spot", priority="BATCH")
    events = await read_events(client, job_id, KEY_A)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "queued", kinds
    queued = events[0]["data"]
    assert queued["state"] == "QUEUED" and queued["queue"] == "image"
    assert isinstance(queued["position"], int)
    assert isinstance(queued["eta_s"], float) and queued["eta_s"] > 0, queued
    notices = {e["data"]["notice"]: e for e in events if e["event"] == "notice"}
    assert {"spot_fallback", "dispatched"} <= set(notices), kinds
    fallback = notices["spot_fallback"]["data"]
    assert fallback["message"] == "no spot capacity in time; running on-demand"
    assert fallback["worker_id"] == "w0" and fallback["attempt"] == 1
    assert kinds.index("queued") < kinds.index("notice") < kinds.index("result")
    assert kinds[-1] == "result" and events[-1]["id"] == "end"
    keys = [parse_event_id(e["id"]) for e in events]
    assert keys == sorted(keys) and len(set(keys)) == len(keys), [e["id"] for e in events]
    assert time.monotonic() - started >= SPOT_WAIT_S


async def deliveries_of(receiver: Receiver, job_id: str, timeout_s: float = 60) -> list[Received]:
    """The job's deliveries once at least one arrived (the receiver is the module's, shared)."""
    deadline = time.monotonic() + timeout_s
    while True:
        mine = [r for r in receiver.received if json.loads(r.body)["job"]["job_id"] == job_id]
        if mine or time.monotonic() > deadline:
            return mine
        await asyncio.sleep(0.05)


async def test_a_webhook_in_a_json_body_is_delivered_signed_with_a_fresh_result_url(
    client: httpx.AsyncClient, receiver: Receiver, s3: S3Server
):
    job_id = await submit(
        client,
        model="echo",
        prompt="call me back",
        seed=9,
        webhook={"url": receiver.url, "events": ["completed"]},
    )
    (hook,) = await deliveries_of(receiver, job_id)
    assert hook.path == "/hook" and hook.headers["x-mediamesh-event"] == "completed"
    assert verify(SECRET, hook.headers["x-mediamesh-signature"], hook.body, time.time())
    assert not verify("not-the-secret", hook.headers["x-mediamesh-signature"], hook.body, 0)
    body = json.loads(hook.body)
    assert body["id"] == hook.headers["x-mediamesh-delivery"]
    assert body["job"] == {"job_id": job_id, "tenant": "a", "model": "echo", "state": "SUCCEEDED"}
    info = await get_job(client, job_id)
    assert body["result"]["sha256"] == info["result"]["sha256"]
    assert body["result"]["size_bytes"] == info["result"]["size_bytes"]
    # With the bucket, the delivery carries a URL signed when it was sent.
    assert_presigned(body["result"]["url"], s3)
    fetched = await fetch_anonymously(body["result"]["url"])
    assert fetched.status_code == 200
    assert hashlib.sha256(fetched.content).hexdigest() == info["result"]["sha256"]


async def test_a_webhook_in_a_json_body_off_the_allowlist_or_with_unknown_events_is_a_400(
    client: httpx.AsyncClient, receiver: Receiver
):
    refused = {
        f"http://127.0.0.1:{receiver.port + 1}/hook": ["completed"],
        receiver.url: ["started"],
    }
    fields = []
    for url, events in refused.items():
        response = await client.post(
            "/v1/jobs",
            json={"model": "echo", "prompt": "x", "webhook": {"url": url, "events": events}},
            headers=bearer(KEY_A),
        )
        assert response.status_code == 400, response.text
        assert response.json()["code"] == "INVALID_ARGUMENT"
        fields.append(response.json()["message"].split(":", 1)[0])
    assert fields == ["webhook.url", "webhook.events[0]"]
