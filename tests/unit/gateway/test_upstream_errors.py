"""Scheduler statuses as the gateway's errors: a message its own channel refused for size is a
configuration fault (INTERNAL), never an overload to retry (RESOURCE_EXHAUSTED, HTTP 429)."""

from __future__ import annotations

import grpc
import pytest

from mediamesh.common.errors import MeshError, StatusCode
from mediamesh.gateway.api.upstream import mesh_errors


def _error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


async def test_an_answer_above_the_channels_limit_is_internal_and_names_the_setting() -> None:
    oversized = "Received message larger than max (1048662 vs. 1048576)"
    with pytest.raises(MeshError) as caught:
        async with mesh_errors():
            raise _error(grpc.StatusCode.RESOURCE_EXHAUSTED, oversized)
    assert caught.value.code is StatusCode.INTERNAL
    assert "gateway.max_message_bytes" in caught.value.message
    assert caught.value.retry_after_s == 0


async def test_the_schedulers_own_overload_stays_resource_exhausted() -> None:
    with pytest.raises(MeshError) as caught:
        async with mesh_errors():
            raise _error(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue image is full (10000 jobs)")
    assert caught.value.code is StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.message == "queue image is full (10000 jobs)"
