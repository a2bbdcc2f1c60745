"""Scheduler errors that describe the mesh's insides reach callers reworded: a refused gateway
credential, a scheduler out of reach. The scheduler's own UNAVAILABLE passes as it is."""

from __future__ import annotations

import logging

import grpc
import pytest

from mediamesh.common.errors import MeshError, StatusCode
from mediamesh.gateway.api import upstream

CONNECT_FAILED = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.5:50052: "
    "Failed to connect to remote host: Connection refused"
)


def _error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(upstream, "throttle", upstream.LogThrottle(60.0, clock))
    return clock


async def _raised(error: grpc.aio.AioRpcError) -> MeshError:
    with pytest.raises(MeshError) as caught:
        async with upstream.mesh_errors():
            raise error
    return caught.value


@pytest.mark.parametrize(
    "code", [grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED]
)
async def test_a_refused_gateway_credential_is_unavailable_and_logged_once_a_minute(
    code: grpc.StatusCode, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    refusal = _error(code, "missing or wrong x-mediamesh-token metadata (internal service)")
    for now in (0.0, 30.0, 59.9, 60.0, 61.0):
        clock.now = now
        error = await _raised(refusal)
        assert error.code is StatusCode.UNAVAILABLE
        assert error.message == upstream.REFUSED_MESSAGE
        assert "x-mediamesh-token" not in error.message
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2  # at 0 s and 60 s
    assert "internal_auth" in errors[0] and "x-mediamesh-token" in errors[0]


async def test_a_failed_connection_hides_the_schedulers_address_from_callers(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    for details in (CONNECT_FAILED, "Socket closed"):
        error = await _raised(_error(grpc.StatusCode.UNAVAILABLE, details))
        assert error.code is StatusCode.UNAVAILABLE
        assert error.message == upstream.UNREACHABLE_MESSAGE
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1 and "ipv4:10.0.0.5:50052" in lines[0]


async def test_the_schedulers_own_unavailable_reaches_callers_as_it_is(clock: Clock) -> None:
    store = "the job store cannot take new jobs right now; retry"
    error = await _raised(_error(grpc.StatusCode.UNAVAILABLE, store))
    assert error.code is StatusCode.UNAVAILABLE and error.message == store
