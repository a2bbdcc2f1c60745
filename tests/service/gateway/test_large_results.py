"""Results above the inline limit: a reference in the event, then Download in chunks."""

from __future__ import annotations

import asyncio
import hashlib
import io
import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PIL import Image

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.sdk import AsyncClient, Client, Result
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, auth, keyed

LIMIT = 1024  # the smallest inline limit the settings allow


@pytest.fixture
async def tiny_inline_mesh(tmp_path: Path, models_dir: Path) -> AsyncIterator[InProcessMesh]:
    gateway = {**keyed(), "inline_result_limit_bytes": LIMIT, "download_chunk_bytes": LIMIT}
    mesh = await start_mesh(tmp_path, models_dir, [["flux-tiny"]], gateway=gateway)
    yield mesh
    await stop_mesh(mesh)


def png_request() -> common_pb2.GenerateRequest:
    return common_pb2.GenerateRequest(model="flux-tiny", prompt="a fox", steps=1, seed=4)


async def test_a_png_above_the_limit_comes_as_a_reference_then_in_chunks(tiny_inline_mesh):
    stub = tiny_inline_mesh.gateway_stub()
    events = [e async for e in stub.Generate(png_request(), metadata=auth(KEY_A))]
    result, job_id = events[-1].result, events[-1].job_id
    assert result.data == b"" and result.mime_type == "image/png"
    size = result.artifact.size_bytes
    assert size > 4 * LIMIT and len(result.artifact.sha256) == 64

    chunks = [
        c
        async for c in stub.Download(
            gateway_pb2.DownloadRequest(job_id=job_id), metadata=auth(KEY_A)
        )
    ]
    assert len(chunks) == math.ceil(size / LIMIT)
    assert [c.offset for c in chunks] == [i * LIMIT for i in range(len(chunks))]
    assert all(len(c.data) <= LIMIT and c.total_size == size for c in chunks)
    data = b"".join(c.data for c in chunks)
    runtime = tiny_inline_mesh.scheduler.runtime
    stored = await runtime.artifacts.read(runtime.results[job_id].path)
    assert data == stored
    assert hashlib.sha256(data).hexdigest() == result.artifact.sha256 == chunks[0].sha256
    assert Image.open(io.BytesIO(data)).size == (64, 64)

    # An interrupted download resumes from an offset.
    tail = [
        c.data
        async for c in stub.Download(
            gateway_pb2.DownloadRequest(job_id=job_id, offset=2 * LIMIT), metadata=auth(KEY_A)
        )
    ]
    assert b"".join(tail) == data[2 * LIMIT :]


async def test_the_sdk_clients_download_what_does_not_come_inline(tiny_inline_mesh):
    address = f"127.0.0.1:{tiny_inline_mesh.gateway.port}"

    def generate_blocking() -> Result:
        with Client(address, api_key=KEY_A) as client:
            *_, last = client.generate("flux-tiny", "a fox", steps=1, seed=4)
        assert isinstance(last, Result)
        return last

    blocking = await asyncio.to_thread(generate_blocking)
    async with AsyncClient(address, api_key=KEY_A) as client:
        handle = await client.submit("flux-tiny", "a fox", steps=1, seed=4)
        followed = [e async for e in client.watch(handle.job_id)][-1]
    for outcome in (blocking, followed):
        assert isinstance(outcome, Result)
        stored = tiny_inline_mesh.scheduler.runtime.results[outcome.job_id]
        assert outcome.state == "SUCCEEDED" and outcome.mime_type == "image/png"
        assert len(outcome.data) == stored.size_bytes == outcome.size_bytes > LIMIT
        assert hashlib.sha256(outcome.data).hexdigest() == stored.sha256 == outcome.sha256
    assert blocking.data == followed.data  # same seed, same bytes
