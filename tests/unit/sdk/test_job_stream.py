"""Which events of a re-attached job stream are news, and how long re-attaching goes on."""

from __future__ import annotations

import pytest

from mediamesh.sdk import Error, Event, GatewayError, JobState, Notice, Progress, Queued, Result
from mediamesh.sdk.flow import JobStream
from mediamesh.sdk.options import RETRY_MAX_BACKOFF_S, ClientSettings

JOB = "j-1"


def queued(position: int) -> Queued:
    return Queued(job_id=JOB, state=JobState.QUEUED, position=position, eta_s=1.0, queue="q")


def progress(step: int, attempt: int = 1) -> Progress:
    return Progress(job_id=JOB, state=JobState.RUNNING, step=step, total_steps=9, attempt=attempt)


def notice(kind: str, attempt: int = 1) -> Notice:
    return Notice(
        job_id=JOB, state=JobState.DISPATCHED, kind=kind, message="", worker_id="w", attempt=attempt
    )


RESULT = Result(job_id=JOB, state=JobState.SUCCEEDED, data=b"x", mime_type="image/png", seed=1)
LOST = GatewayError("UNAVAILABLE", "Stream removed")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def delivered(stream: JobStream, events: list[Event]) -> list[Event]:
    return [e for e in events if stream.is_news(e)]


@pytest.mark.parametrize(
    ("seen", "snapshot", "news"),
    [
        ([queued(2)], queued(2), False),  # the same place in the same queue
        ([queued(2)], queued(1), True),  # it moved up while the stream was down
        ([queued(0), notice("dispatched")], notice("dispatched"), False),
        ([queued(0), progress(1), progress(2)], progress(2), False),
        ([queued(0), progress(1), progress(2)], progress(1), False),
        ([queued(0), progress(1), progress(2)], progress(5), True),  # steps ran meanwhile
        ([progress(4)], progress(1, attempt=2), True),  # a second run (lost worker)
        ([progress(4)], notice("dispatched", attempt=2), True),
        ([progress(9)], RESULT, True),
        ([progress(9)], Error(job_id=JOB, state=JobState.FAILED, code="X", message=""), True),
    ],
)
def test_a_watch_snapshot_is_dropped_only_when_already_delivered(
    seen: list[Event], snapshot: Event, news: bool
) -> None:
    stream = JobStream(ClientSettings())
    assert delivered(stream, seen) == seen
    assert stream.reattach_wait(LOST) is not None
    assert stream.is_news(snapshot) is news


def test_only_the_first_event_after_a_reattach_is_a_replay() -> None:
    stream = JobStream(ClientSettings())
    delivered(stream, [queued(0), progress(1), progress(2)])
    assert stream.reattach_wait(LOST) is not None
    # The snapshot repeats step 2; what follows is live, each event once.
    assert delivered(stream, [progress(2), progress(3), progress(4), RESULT]) == [
        progress(3),
        progress(4),
        RESULT,
    ]
    # Without a break nothing is dropped: the mesh sends a queue place again when it changes.
    again = JobStream(ClientSettings())
    assert delivered(again, [queued(1), queued(1)]) == [queued(1), queued(1)]


def test_reattaching_backs_off_and_gives_up_after_reattach_s_without_news() -> None:
    clock = Clock()
    stream = JobStream(ClientSettings(reattach_s=30), clock)
    delivered(stream, [queued(0)])
    waits = []
    while (wait := stream.reattach_wait(GatewayError("UNAVAILABLE", "down"))) is not None:
        assert 0 <= wait <= RETRY_MAX_BACKOFF_S
        waits.append(wait)
        # Each Watch replays the same queue place and breaks again: no news of the job.
        clock.now += wait + 0.01
        assert not stream.is_news(queued(0))
    assert 100 + 30 - RETRY_MAX_BACKOFF_S - 1 <= clock.now <= 100 + 30 + 1
    assert len(waits) >= 6  # 0.2, 0.4, 0.8, 1.6, 3.2, then 5 s at most each


def test_news_starts_the_budget_again() -> None:
    clock = Clock()
    stream = JobStream(ClientSettings(reattach_s=10), clock)
    delivered(stream, [progress(1)])
    assert stream.reattach_wait(LOST) is not None
    clock.now += 9
    assert stream.is_news(progress(2))  # the re-attached stream brought a new step
    clock.now += 20  # a long healthy stream, then another break
    assert stream.reattach_wait(LOST) is not None


@pytest.mark.parametrize("code", ["DEADLINE_EXCEEDED", "CANCELLED", "NOT_FOUND", "INTERNAL"])
def test_other_errors_are_raised_naming_the_job(code: str) -> None:
    stream = JobStream(ClientSettings())
    delivered(stream, [queued(0)])
    error = GatewayError(code, "no")
    assert stream.reattach_wait(error) is None
    assert error.job_id == JOB and str(error) == f"{code}: no (job {JOB})"


def test_nothing_is_reattached_before_a_job_id_nor_with_reattach_s_zero() -> None:
    error = GatewayError("UNAVAILABLE", "down")
    assert JobStream(ClientSettings()).reattach_wait(error) is None
    assert error.job_id == ""
    never = JobStream(ClientSettings(reattach_s=0))
    delivered(never, [queued(0)])
    assert never.reattach_wait(error) is None and error.job_id == JOB
    with pytest.raises(ValueError, match=r"^reattach_s: "):
        ClientSettings(reattach_s=-1)


def test_a_keyed_request_broken_before_its_first_event_is_sent_again() -> None:
    clock = Clock()
    stream = JobStream(ClientSettings(reattach_s=5), clock, resendable=True)
    error = GatewayError("UNAVAILABLE", "down")
    waits = []
    while (wait := stream.reattach_wait(error)) is not None:
        waits.append(wait)
        clock.now += wait + 0.5
    assert waits and clock.now - 100 <= 5 + RETRY_MAX_BACKOFF_S + 0.5
    assert error.job_id == ""  # none was named: the caller cannot know one
    # A refusal is not resent, nor anything with reattach_s 0.
    assert JobStream(ClientSettings(), resendable=True).reattach_wait(LOST) is not None
    refused = GatewayError("INVALID_ARGUMENT", "steps: no")
    assert JobStream(ClientSettings(), resendable=True).reattach_wait(refused) is None
    never = JobStream(ClientSettings(reattach_s=0), resendable=True)
    assert never.reattach_wait(GatewayError("UNAVAILABLE", "down")) is None


def test_a_watch_names_its_job_before_any_event() -> None:
    stream = JobStream(ClientSettings(), job_id=JOB)
    error = GatewayError("UNAVAILABLE", "down")
    assert stream.reattach_wait(error) is not None and error.job_id == JOB


def test_stream_timeout_s_bounds_the_whole_follow_not_each_watch() -> None:
    clock = Clock()
    stream = JobStream(ClientSettings(stream_timeout_s=20), clock)
    assert JobStream(ClientSettings(), clock).seconds_left() is None
    delivered(stream, [queued(0)])
    clock.now += 12
    assert stream.reattach_wait(LOST) is not None
    assert stream.seconds_left() == pytest.approx(8)
    assert stream.is_news(progress(1))
    clock.now += 8.5  # the re-attached Watch ran out the caller's deadline
    assert stream.reattach_wait(LOST) is None


def test_a_queued_event_without_an_estimate_reads_as_none() -> None:
    from mediamesh.common.generated.v1 import common_pb2
    from mediamesh.sdk.api.convert import event

    message = common_pb2.GenerateEvent(job_id=JOB, queued=common_pb2.Queued(position=2))
    waiting = event(message)
    assert isinstance(waiting, Queued) and waiting.eta_s is None and waiting.position == 2
    message.queued.eta_s = 1.5
    estimated = event(message)
    assert isinstance(estimated, Queued) and estimated.eta_s == 1.5
