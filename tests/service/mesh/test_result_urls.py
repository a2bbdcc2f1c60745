"""Results as URLs through an in-process mesh: presigned S3 URLs when the request asks or
the result exceeds the inline limit, and what the local backend answers instead."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import httpx
import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from tests.s3_server import CREDENTIALS, S3Server, s3_server
from tests.service.conftest import start_mesh, stop_mesh


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


async def last_event(stub, request: common_pb2.GenerateRequest) -> common_pb2.GenerateEvent:
    events = [e async for e in stub.Generate(request)]
    return events[-1]


async def download(stub, job_id: str) -> bytes:
    chunks = stub.Download(gateway_pb2.DownloadRequest(job_id=job_id))
    return b"".join([c.data async for c in chunks])


async def test_s3_results_come_as_urls_when_asked_or_too_large(
    tmp_path, models_dir, s3, monkeypatch
):
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    mesh = await start_mesh(
        tmp_path,
        models_dir,
        [["flux-tiny", "echo"]],
        scheduler={"artifacts": s3.artifact_settings(prefix="svc")},
        gateway={"inline_result_limit_bytes": 1024},
    )
    try:
        stub = mesh.gateway_stub()
        asked = await last_event(
            stub, common_pb2.GenerateRequest(model="echo", prompt="a", result_as_url=True)
        )
        small = await last_event(stub, common_pb2.GenerateRequest(model="echo", prompt="a"))
        large = await last_event(
            stub,
            common_pb2.GenerateRequest(
                model="flux-tiny", prompt="noise", steps=1, width=64, height=64, seed=2
            ),
        )
        assert small.result.data and not small.result.url  # fits, and no URL asked for
        assert large.result.artifact.size_bytes > 1024
        async with httpx.AsyncClient() as client:
            for event in (asked, large):
                result = event.result
                assert not result.data and result.url.startswith(s3.endpoint)
                fetched = await client.get(result.url)
                assert fetched.status_code == 200
                assert hashlib.sha256(fetched.content).hexdigest() == result.artifact.sha256
                assert await download(stub, event.job_id) == fetched.content
        # A watch that re-attaches after the end gets a URL too.
        replay = [e async for e in stub.Watch(gateway_pb2.WatchRequest(job_id=asked.job_id))]
        assert replay[-1].result.url.startswith(s3.endpoint)
        assert f"svc/{asked.job_id}.png" in s3.object_keys()
    finally:
        await stop_mesh(mesh)


async def test_the_local_backend_answers_result_as_url_with_a_reference_to_download(image_mesh):
    stub = image_mesh.gateway_stub()
    event = await last_event(
        stub, common_pb2.GenerateRequest(model="echo", prompt="a", result_as_url=True)
    )
    result = event.result
    assert event.state == common_pb2.SUCCEEDED
    assert not result.data and not result.url and result.url_expires_unix_ms == 0
    data = await download(stub, event.job_id)
    assert hashlib.sha256(data).hexdigest() == result.artifact.sha256
    info = await stub.GetJob(gateway_pb2.GetJobRequest(job_id=event.job_id))
    assert info.result.artifact.sha256 == result.artifact.sha256 and not info.result.url
