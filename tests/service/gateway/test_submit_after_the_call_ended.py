"""Gateway.Submit makes no job its caller can never learn of: a call with no time left is
DEADLINE_EXCEEDED before anything is submitted, and a job the scheduler accepts after the
call has ended (deadline passed, or cancelled by its client) is cancelled, unless the request
carries an idempotency_key, whose retry gets that same job."""

from __future__ import annotations

import asyncio

import pytest

from mediamesh.common.errors import MeshError, StatusCode
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.common.settings import TenantSettings
from mediamesh.gateway.api.submit_call import submit_for_call
from mediamesh.gateway.core.tenancy import Caller

CALLER = Caller(tenant="a", quota=TenantSettings())


class FakeContext:
    """A call's context whose time left and end the test sets."""

    def __init__(self, remaining: float | None = 10.0) -> None:
        self.remaining = remaining
        self.ended = False

    def time_remaining(self) -> float | None:
        return self.remaining

    def done(self) -> bool:
        return self.ended


class FakePlane:
    """A data plane whose scheduler answers when the test releases it."""

    def __init__(self) -> None:
        self.submitted = asyncio.Event()
        self.answer = asyncio.Event()
        self.cancelled: list[str] = []

    async def submit(self, request, caller) -> gateway_pb2.JobHandle:
        self.submitted.set()
        await self.answer.wait()
        return gateway_pb2.JobHandle(job_id="job-1")

    async def cancel(self, job_id: str, caller) -> common_pb2.JobInfo:
        self.cancelled.append(job_id)
        return common_pb2.JobInfo()


def request(key: str = "") -> common_pb2.GenerateRequest:
    return common_pb2.GenerateRequest(model="echo", prompt="x", idempotency_key=key)


async def test_a_call_with_no_time_left_submits_nothing():
    plane = FakePlane()
    with pytest.raises(MeshError) as caught:
        await submit_for_call(plane, request(), CALLER, FakeContext(remaining=0.0))
    assert caught.value.code == StatusCode.DEADLINE_EXCEEDED
    assert "no job was made" in caught.value.message
    assert not plane.submitted.is_set()


@pytest.mark.parametrize(("key", "cancelled"), [("", ["job-1"]), ("k1", [])])
async def test_a_job_accepted_after_the_call_was_cancelled_is_cancelled_without_a_key(
    key: str, cancelled: list[str]
):
    plane = FakePlane()
    call = asyncio.ensure_future(submit_for_call(plane, request(key), CALLER, FakeContext()))
    await plane.submitted.wait()
    call.cancel()  # as gRPC cancels the handler of a call that ended
    await asyncio.sleep(0)
    plane.answer.set()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert plane.cancelled == cancelled


@pytest.mark.parametrize(("key", "cancelled"), [("", ["job-1"]), ("k1", [])])
async def test_a_job_accepted_after_the_deadline_passed_is_cancelled_without_a_key(
    key: str, cancelled: list[str]
):
    plane, context = FakePlane(), FakeContext()
    call = asyncio.ensure_future(submit_for_call(plane, request(key), CALLER, context))
    await plane.submitted.wait()
    context.remaining = 0.0
    plane.answer.set()
    if key:
        assert (await call).job_id == "job-1"
    else:
        with pytest.raises(MeshError) as caught:
            await call
        assert caught.value.code == StatusCode.DEADLINE_EXCEEDED
    assert plane.cancelled == cancelled


async def test_a_call_in_time_keeps_its_job():
    plane = FakePlane()
    plane.answer.set()
    handle = await submit_for_call(plane, request(), CALLER, FakeContext())
    assert handle.job_id == "job-1" and plane.cancelled == []
