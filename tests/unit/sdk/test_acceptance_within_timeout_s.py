"""Before a job is accepted, a resendable Generate is bounded by `timeout_s` (what a Submit
may take), not by `reattach_s`; after it, only `stream_timeout_s` bounds the wait, and the
error of a wait that ran out names the job, which goes on."""

from __future__ import annotations

from mediamesh.common.errors import StatusCode
from mediamesh.sdk import GatewayError, JobState, Queued
from mediamesh.sdk.flow import JobStream, unary_failure
from mediamesh.sdk.options import ClientSettings

JOB = "j-1"
DOWN = GatewayError("UNAVAILABLE", "failed to connect to all addresses")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def queued() -> Queued:
    return Queued(job_id=JOB, state=JobState.QUEUED, position=0, eta_s=1.0, queue="image")


def test_resending_before_acceptance_stops_at_timeout_s_naming_the_gateway() -> None:
    clock = Clock()
    settings = ClientSettings(target="gw.example:50051", timeout_s=3, reattach_s=60)
    stream = JobStream(settings, clock, resendable=True)
    assert stream.seconds_left() == 3
    while (wait := stream.reattach_wait(DOWN)) is not None:
        clock.now += wait + 0.01
    assert 2.9 <= clock.now - 100 <= 3  # sent until its timeout, not a backoff before it
    error = stream.error_to_raise(DOWN)
    assert error.code == "UNAVAILABLE" and error.job_id == "" and error.field is None
    assert error.message.startswith("cannot reach the gateway at gw.example:50051 (")
    assert "timeout_s is 3): failed to connect to all addresses" in error.message


def test_once_accepted_only_stream_timeout_s_bounds_the_wait() -> None:
    clock = Clock()
    stream = JobStream(ClientSettings(timeout_s=3), clock, resendable=True)
    assert stream.is_news(queued())
    assert stream.seconds_left() is None  # timeout_s was for the acceptance alone
    assert stream.error_to_raise(DOWN) is DOWN  # a broken follow names its job instead
    bounded = JobStream(ClientSettings(timeout_s=3, stream_timeout_s=10), clock, resendable=True)
    assert bounded.seconds_left() == 3
    bounded.is_news(queued())
    assert bounded.seconds_left() == 10


def test_the_error_of_a_wait_that_ran_out() -> None:
    clock = Clock()
    stream = JobStream(ClientSettings(target="gw:1", stream_timeout_s=2.5), clock, job_id=JOB)
    clock.now += 2.5
    assert stream.seconds_left() == 0
    error = stream.expired(connected=True)
    assert error.code == "DEADLINE_EXCEEDED" and error.job_id == JOB and error.field is None
    assert error.message == (
        "stream_timeout_s (2.5 s) ran out before job 'j-1' ended; the job goes on: follow it "
        "with watch(job_id) or stop it with cancel(job_id)"
    )
    unaccepted = JobStream(ClientSettings(target="gw:1", timeout_s=3), clock, resendable=True)
    clock.now += 3
    unreachable = unaccepted.expired(connected=False)
    assert unreachable.code == "UNAVAILABLE"
    assert unreachable.message == "cannot reach the gateway at gw:1 (3.0 s; timeout_s is 3)"
    silent = unaccepted.expired(connected=True)
    assert silent.code == "DEADLINE_EXCEEDED"
    assert silent.message.startswith("no answer from the gateway at gw:1 (3.0 s; timeout_s is 3)")


def test_an_overload_wait_starts_the_acceptance_wait_again() -> None:
    clock = Clock()
    stream = JobStream(ClientSettings(timeout_s=3, stream_timeout_s=20), clock, resendable=True)
    clock.now += 2
    assert stream.wait_out_overload(5)  # the gateway answered: it asked for 5 s
    assert stream.seconds_left() == 5 + 3
    clock.now += 5
    assert not stream.wait_out_overload(14)  # past stream_timeout_s: raise the answer instead


def test_a_deadline_on_a_channel_never_connected_is_an_unreachable_gateway() -> None:
    deadline = GatewayError(StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
    unreachable = unary_failure(deadline, "gw:1", 1.0, connected=False)
    assert unreachable.code == "UNAVAILABLE"
    assert unreachable.message == (
        "cannot reach the gateway at gw:1 (1.0 s of tries): Deadline Exceeded"
    )
    # A gateway that was reached and ran out of time says so as it is.
    assert unary_failure(deadline, "gw:1", 1.0, connected=True) is deadline
