"""The scheduler's link keeps one stub per worker address, and a reset drops it with its channel."""

from __future__ import annotations

from mediamesh.common.credentials import InternalCredentials
from mediamesh.scheduler.api.worker_link import GrpcWorkerLink

ADDRESS = "127.0.0.1:1"


async def test_a_worker_registering_again_gets_a_stub_on_a_new_channel() -> None:
    link = GrpcWorkerLink(InternalCredentials(), max_message_bytes=1 << 20)
    try:
        first = link._stub(ADDRESS)
        assert link._stub(ADDRESS) is first  # built once, not once per batch
        link.reset(ADDRESS)
        again = link._stub(ADDRESS)
        assert again is not first
        assert again.RunBatch._channel is not first.RunBatch._channel
    finally:
        await link.close()
