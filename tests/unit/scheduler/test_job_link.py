"""The scheduler's side of JobLink, over a stand-in for SubmitAndWatch: exchanges are routed
by id, end alone, can be stopped or cancelled, and share messages when they wait together."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from mediamesh.common.api.multiplexed import PACK_BYTES
from mediamesh.common.api.status import to_number
from mediamesh.common.errors import InvalidArgument, StatusCode
from mediamesh.common.generated.v1 import common_pb2, scheduler_pb2
from mediamesh.scheduler.api.job_link import JobLinks, serve_job_link
from tests.job_link_stand_in import StandIn


def submit(exchange_id: int, model: str = "echo", **trace: str) -> scheduler_pb2.JobLinkRequest:
    request = common_pb2.GenerateRequest(model=model, prompt=f"job-{exchange_id}")
    return scheduler_pb2.JobLinkRequest(
        exchange_id=exchange_id,
        submit=scheduler_pb2.SubmitRequest(request=request, tenant="t"),
        trace_context=trace,
    )


class Link:
    """One stream: requests fed through a queue, answers collected as they come."""

    def __init__(self, stand_in: StandIn) -> None:
        self._requests: asyncio.Queue[object] = asyncio.Queue()
        self.messages: list[scheduler_pb2.JobLinkEvents] = []
        self.task = asyncio.create_task(self._serve(stand_in))

    async def _incoming(self) -> AsyncIterator[object]:
        while (item := await self._requests.get()) is not None:
            if isinstance(item, Exception):
                raise item
            yield item

    async def _serve(self, stand_in: StandIn) -> None:
        requests = self._incoming()
        async for message in serve_job_link(requests, stand_in.follow, stand_in.cancel):  # type: ignore[arg-type]
            self.messages.append(message)

    def send(self, *requests: scheduler_pb2.JobLinkRequest) -> None:
        self._requests.put_nowait(scheduler_pb2.JobLinkRequests(requests=requests))

    def fail(self, error: Exception) -> None:
        """The request stream fails as gRPC's does for a message that does not parse."""
        self._requests.put_nowait(error)

    def close(self) -> None:
        self._requests.put_nowait(None)

    def events(self) -> list[scheduler_pb2.JobLinkEvent]:
        return [event for message in self.messages for event in message.events]

    def of(self, exchange_id: int) -> list[scheduler_pb2.JobLinkEvent]:
        return [e for e in self.events() if e.exchange_id == exchange_id]

    async def ended(self) -> None:
        await asyncio.wait_for(self.task, 5)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_exchanges_come_back_in_order_by_id_and_share_messages() -> None:
    link = Link(StandIn(result_bytes=3))
    link.send(submit(1), submit(2), submit(3))
    link.close()
    await link.ended()
    for exchange_id in (1, 2, 3):
        events = [e.event for e in link.of(exchange_id)]
        assert [e.state for e in events] == [common_pb2.QUEUED, common_pb2.SUCCEEDED]
        assert {e.job_id for e in events} == {f"job-{exchange_id}"}
    # Six events of three jobs that happened together: fewer messages than events.
    assert len(link.messages) < 6


async def test_a_refusal_ends_its_exchange_alone_with_its_code_and_retry_hint() -> None:
    link = Link(StandIn(result_bytes=3))
    link.send(submit(1, "refused"), submit(2), submit(3, "crash"))
    link.close()
    await link.ended()
    (refused,) = link.of(1)
    assert refused.status.code == to_number(StatusCode.RESOURCE_EXHAUSTED)
    assert refused.status.message == "the image queue is full"
    assert refused.status.retry_after_ms == 1500
    (crashed,) = link.of(3)
    assert crashed.status.code == to_number(StatusCode.INTERNAL)
    assert "scheduler's log" in crashed.status.message
    assert link.of(2)[-1].event.result.data == b"xxx"


async def test_a_stopped_exchange_stops_following_and_sends_nothing_more() -> None:
    stand_in = StandIn(result_bytes=3)
    link = Link(stand_in)
    link.send(submit(1, "hold"), submit(2, "hold"))
    await settle()
    link.send(scheduler_pb2.JobLinkRequest(exchange_id=1, stop=True))
    await settle()
    assert stand_in.stopped == ["job-1"]
    stand_in.release.set()
    link.close()
    await link.ended()
    assert [e.event.state for e in link.of(1)] == [common_pb2.QUEUED]
    assert [e.event.state for e in link.of(2)] == [common_pb2.QUEUED, common_pb2.SUCCEEDED]


async def test_a_cancelled_exchange_cancels_its_job_once_known_and_sends_nothing_more() -> None:
    stand_in = StandIn(result_bytes=3)
    link = Link(stand_in)
    link.send(submit(1, "hold"), submit(2, "slow-submit"), submit(3, "hold"))
    await settle()
    # Job 1 is known and waiting; job 2's submit is still under way, so its id is not.
    link.send(
        scheduler_pb2.JobLinkRequest(exchange_id=1, cancel=True),
        scheduler_pb2.JobLinkRequest(exchange_id=2, cancel=True),
        scheduler_pb2.JobLinkRequest(exchange_id=99, cancel=True),
    )
    await settle()
    assert stand_in.cancelled == [("job-1", "t")]
    stand_in.submitted.set()
    await settle()
    assert stand_in.cancelled == [("job-1", "t"), ("job-2", "t")]
    stand_in.release.set()
    link.close()
    await link.ended()
    assert [e.event.state for e in link.of(1)] == [common_pb2.QUEUED]
    assert link.of(2) == []  # cancelled before its queued event was sent
    assert [e.event.state for e in link.of(3)] == [common_pb2.QUEUED, common_pb2.SUCCEEDED]
    assert link.of(99) == []


async def test_the_stream_stays_open_while_an_exchange_is() -> None:
    stand_in = StandIn(result_bytes=3)
    link = Link(stand_in)
    link.send(submit(1, "hold"))
    link.close()
    await settle()
    assert not link.task.done()
    stand_in.release.set()
    await link.ended()
    assert link.of(1)[-1].event.HasField("result")


async def test_bad_requests_are_refused_one_exchange_at_a_time() -> None:
    link = Link(StandIn(result_bytes=3))
    crowded = {f"k{i}": "v" for i in range(9)}
    link.send(
        submit(1, **crowded),
        scheduler_pb2.JobLinkRequest(exchange_id=2),
        submit(3, "hold"),
        submit(3),
        submit(4),
    )
    await settle()
    (too_many,) = link.of(1)
    assert too_many.status.code == to_number(StatusCode.INVALID_ARGUMENT)
    assert too_many.status.message.startswith("trace_context: 9 entries; the limit is 8")
    (no_action,) = link.of(2)
    assert no_action.status.message == "action: an exchange opens with submit"
    assert any(e.status.message == "exchange_id: 3 is already open" for e in link.of(3))
    assert link.of(4)[-1].event.HasField("result")
    link.task.cancel()


async def test_events_beyond_the_pack_size_go_in_another_message() -> None:
    link = Link(StandIn(result_bytes=PACK_BYTES * 3 // 4))
    link.send(submit(1), submit(2))
    link.close()
    await link.ended()
    assert all(m.ByteSize() <= PACK_BYTES + 1024 for m in link.messages)
    assert len(link.messages) >= 2
    assert all(e.event.HasField("result") for e in (link.of(1)[-1], link.of(2)[-1]))


async def test_a_message_that_does_not_parse_refuses_the_whole_stream() -> None:
    stand_in = StandIn(result_bytes=3)
    link = Link(stand_in)
    link.send(submit(1, "hold"))
    await settle()
    link.fail(InvalidArgument("request: not a valid mediamesh.v1.JobLinkRequests message"))
    with pytest.raises(InvalidArgument, match="not a valid"):
        await link.ended()
    assert stand_in.stopped == ["job-1"]  # its exchanges end with the stream


async def test_a_closed_link_refuses_new_jobs_and_ends_once_its_open_exchanges_have() -> None:
    stand_in = StandIn(result_bytes=3)
    links = JobLinks()
    requests: asyncio.Queue[scheduler_pb2.JobLinkRequests] = asyncio.Queue()

    async def incoming() -> AsyncIterator[scheduler_pb2.JobLinkRequests]:
        while True:
            yield await requests.get()

    messages: list[scheduler_pb2.JobLinkEvents] = []

    async def serve() -> None:
        async for message in serve_job_link(incoming(), stand_in.follow, stand_in.cancel, links):
            messages.append(message)

    task = asyncio.create_task(serve())
    requests.put_nowait(scheduler_pb2.JobLinkRequests(requests=[submit(1, "hold")]))
    await settle()
    links.close()
    requests.put_nowait(scheduler_pb2.JobLinkRequests(requests=[submit(2)]))
    await settle()
    events = [e for m in messages for e in m.events]
    (refused,) = [e for e in events if e.exchange_id == 2]
    assert refused.status.code == to_number(StatusCode.UNAVAILABLE)
    assert refused.status.message == "the scheduler is shutting down; retry"
    assert not task.done()  # the held job's exchange is still open, though the gateway's side is
    stand_in.release.set()
    await asyncio.wait_for(task, 5)
    assert [e for m in messages for e in m.events][-1].event.HasField("result")
