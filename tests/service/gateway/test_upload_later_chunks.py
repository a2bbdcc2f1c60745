"""An upload's sha256 and mime_type describe the whole upload and are read from its first
chunk: a later chunk may leave them empty or repeat them, and one that sets another value is
refused naming the field, rather than ignored."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from mediamesh.common.generated.v1 import gateway_pb2, scheduler_pb2, scheduler_pb2_grpc
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A, auth
from tests.service.gateway.http_support import (
    http_mesh,  # noqa: F401 (a fixture)
    png_bytes,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def upload(mesh: InProcessMesh, later: dict[str, str]) -> gateway_pb2.UploadHandle:
    """A PNG uploaded in two chunks, the second carrying `later`."""
    data = png_bytes()
    first = {"sha256": hashlib.sha256(data).hexdigest(), "mime_type": "image/png"}

    async def chunks() -> AsyncIterator[gateway_pb2.UploadChunk]:
        yield gateway_pb2.UploadChunk(data=data[:100], **first)
        yield gateway_pb2.UploadChunk(data=data[100:], **later)

    handle: gateway_pb2.UploadHandle = await mesh.gateway_stub().Upload(
        chunks(), metadata=auth(KEY_A), timeout=30
    )
    return handle


@pytest.mark.parametrize(
    ("later", "field"),
    [({"sha256": "0" * 64}, "sha256"), ({"mime_type": "image/jpeg"}, "mime_type")],
)
async def test_a_later_chunk_that_changes_them_is_refused_naming_the_field(
    http_mesh: InProcessMesh,  # noqa: F811
    later: dict[str, str],
    field: str,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await upload(http_mesh, later)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(f"{field}: chunk 2 sets ")


async def test_a_later_chunk_may_repeat_them(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    data = png_bytes()
    same = {"sha256": hashlib.sha256(data).hexdigest(), "mime_type": "image/png"}
    assert (await upload(http_mesh, same)).input_id
    assert (await upload(http_mesh, {})).input_id


@pytest.mark.parametrize(
    ("later", "field"),
    [
        ({"tenant": "b"}, "tenant"),
        ({"chunk": {"sha256": "0" * 64}}, "sha256"),
        ({"chunk": {"mime_type": "image/jpeg"}}, "mime_type"),
    ],
)
async def test_the_scheduler_refuses_them_too_from_a_client_of_its_own(
    http_mesh: InProcessMesh,  # noqa: F811
    later: dict[str, Any],
    field: str,
) -> None:
    data = png_bytes()
    first = {"sha256": hashlib.sha256(data).hexdigest(), "mime_type": "image/png"}
    second = {**later, "chunk": {**later.get("chunk", {}), "data": data[100:]}}

    async def chunks() -> AsyncIterator[scheduler_pb2.ScopedUploadChunk]:
        yield scheduler_pb2.ScopedUploadChunk(
            chunk=gateway_pb2.UploadChunk(data=data[:100], **first), tenant="a"
        )
        yield scheduler_pb2.ScopedUploadChunk(**second)

    async with grpc.aio.insecure_channel(f"127.0.0.1:{http_mesh.scheduler.port}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await scheduler_pb2_grpc.SchedulerStub(channel).Upload(chunks(), timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(f"{field}: chunk 2 ")
