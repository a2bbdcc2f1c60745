"""Every call to a gateway that never answered says so in one wording, naming the address,
and a watch of one gives up at the client's timeout_s rather than after reattach_s."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from mediamesh.sdk import AsyncClient, Client, GatewayError
from mediamesh.sdk.flow import JobStream
from mediamesh.sdk.options import ClientSettings


def _closed_port() -> str:
    """An address on loopback where nothing listens (the port is freed again at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_watch_of_a_gateway_never_reached_gives_up_at_timeout_s() -> None:
    target = _closed_port()
    started = time.monotonic()
    with Client(target, timeout_s=2, reattach_s=60) as client, pytest.raises(GatewayError) as e:
        list(client.watch("job-1"))
    took = time.monotonic() - started
    assert took < 10, took  # not the 60 s reattach_s
    assert e.value.code == "UNAVAILABLE" and e.value.job_id == "job-1"
    assert e.value.message.startswith(f"cannot reach the gateway at {target} (")
    assert "timeout_s is 2" in e.value.message


@pytest.mark.parametrize("call", ["list_jobs", "cancel"])
def test_unary_calls_name_the_gateway_they_cannot_reach(call: str) -> None:
    target = _closed_port()
    with Client(target, timeout_s=5) as client, pytest.raises(GatewayError) as e:
        client.list_jobs() if call == "list_jobs" else client.cancel("job-1")
    assert e.value.code == "UNAVAILABLE"
    assert e.value.message.startswith(f"cannot reach the gateway at {target} (")
    assert "s of tries): failed to connect" in e.value.message


def test_the_async_client_says_the_same() -> None:
    target = _closed_port()

    async def run() -> GatewayError:
        async with AsyncClient(target, timeout_s=5) as client:
            try:
                await client.list_jobs()
            except GatewayError as exc:
                return exc
        raise AssertionError("list_jobs succeeded")

    error = asyncio.run(run())
    assert error.message.startswith(f"cannot reach the gateway at {target} (")


def test_once_the_gateway_answered_a_broken_watch_re_attaches_for_reattach_s() -> None:
    # The timeout_s bound is only for a gateway never reached.
    from mediamesh.sdk import JobState, Queued

    now = [100.0]
    settings = ClientSettings(timeout_s=2, reattach_s=60)
    stream = JobStream(settings, lambda: now[0], job_id="job-1")
    assert stream.seconds_left() == 2
    stream.is_news(Queued(job_id="job-1", state=JobState.QUEUED, position=0, eta_s=1, queue="q"))
    assert stream.seconds_left() is None
    down = GatewayError("UNAVAILABLE", "failed to connect to all addresses")
    now[0] += 30
    assert stream.reattach_wait(down) is not None
    assert stream.error_to_raise(down) is down


@pytest.mark.parametrize("call", ["get", "list_models"])
def test_a_short_timeout_s_names_the_gateway_too(call: str) -> None:
    # With 1 s the deadline often runs out while gRPC still retries the connection: the
    # call then ends DEADLINE_EXCEEDED rather than UNAVAILABLE, with the same cause.
    target = _closed_port()
    with Client(target, timeout_s=1) as client, pytest.raises(GatewayError) as e:
        client.get("job-1") if call == "get" else client.list_models()
    assert e.value.code == "UNAVAILABLE"
    assert e.value.message.startswith(f"cannot reach the gateway at {target} (")
