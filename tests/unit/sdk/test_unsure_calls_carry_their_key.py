"""A submit or generate that failed before a job id came may have made the job: its error
carries the idempotency key sent and says how to get the job; and before acceptance an
error the gateway itself sent is what a generate raises, not "no answer"."""

from __future__ import annotations

from mediamesh.sdk import GatewayError
from mediamesh.sdk.flow import JobStream, keyed_failure, unary_failure
from mediamesh.sdk.options import ClientSettings

KEY = "sdk-0123"
SCHEDULER_DOWN = "the scheduler is unreachable; retry"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_unanswered_submit_names_its_key_and_the_retry() -> None:
    error = keyed_failure(GatewayError("DEADLINE_EXCEEDED", "Deadline Exceeded"), KEY, "submit")
    assert error.code == "DEADLINE_EXCEEDED" and error.idempotency_key == KEY
    assert error.message == (
        "Deadline Exceeded; the job may have been made all the same: submit again with "
        "idempotency_key='sdk-0123' to get it (that key answers the job it made, never a "
        "second one)"
    )


def test_a_refusal_carries_the_key_without_the_retry_hint() -> None:
    refused = GatewayError("INVALID_ARGUMENT", "steps: must be at most 50")
    assert keyed_failure(refused, KEY, "submit") is refused
    assert refused.idempotency_key == KEY and refused.message == "steps: must be at most 50"
    too_short = GatewayError("DEADLINE_EXCEEDED", "timeout_ms: 5 is too short")
    assert "may have been made" not in keyed_failure(too_short, KEY, "submit").message


def test_a_generate_given_up_before_acceptance_names_its_key() -> None:
    clock = Clock()
    settings = ClientSettings(target="gw:1", timeout_s=3)
    stream = JobStream(settings, clock, resendable=True, idempotency_key=KEY)
    clock.now += 3
    error = stream.error_to_raise(stream.expired(connected=True))
    assert error.code == "DEADLINE_EXCEEDED" and error.idempotency_key == KEY
    assert error.message.startswith("no answer from the gateway at gw:1 (3.0 s; timeout_s is 3)")
    assert "generate again with idempotency_key='sdk-0123'" in error.message


def test_the_gateways_own_error_is_raised_when_the_sending_stops() -> None:
    clock = Clock()
    settings = ClientSettings(target="gw:1", timeout_s=3)
    stream = JobStream(settings, clock, resendable=True, idempotency_key=KEY)
    answer = GatewayError("UNAVAILABLE", SCHEDULER_DOWN)
    stream.failed(answer, connected=True)
    assert stream.reattach_wait(answer) is not None  # sent again while timeout_s lasts
    clock.now += 3
    error = stream.error_to_raise(stream.expired(connected=True))
    assert error.code == "UNAVAILABLE" and error.idempotency_key == KEY
    assert error.message.startswith(SCHEDULER_DOWN), error.message
    assert "no answer" not in error.message


def test_without_resending_the_gateways_error_is_raised_at_once() -> None:
    settings = ClientSettings(target="gw:1", timeout_s=3, reattach_s=0)
    stream = JobStream(settings, Clock(), resendable=True, idempotency_key=KEY)
    answer = GatewayError("UNAVAILABLE", SCHEDULER_DOWN)
    stream.failed(answer, connected=True)
    assert stream.reattach_wait(answer) is None
    error = stream.error_to_raise(answer)
    assert error.message.startswith(SCHEDULER_DOWN) and "cannot reach" not in error.message


def test_a_watch_given_up_after_the_gateways_errors_raises_the_last() -> None:
    clock = Clock()
    stream = JobStream(ClientSettings(target="gw:1", timeout_s=2), clock, job_id="j-1")
    stream.failed(GatewayError("UNAVAILABLE", SCHEDULER_DOWN), connected=True)
    clock.now += 2
    error = stream.expired(connected=True)
    assert (error.code, error.message, error.job_id) == ("UNAVAILABLE", SCHEDULER_DOWN, "j-1")


def test_a_transport_failure_still_reads_as_an_unreachable_gateway_with_its_cause() -> None:
    clock = Clock()
    stream = JobStream(ClientSettings(target="gw:1", timeout_s=3), clock, resendable=True)
    tls = "failed to connect to all addresses; last error: Tls handshake failed"
    stream.failed(GatewayError("UNAVAILABLE", tls), connected=False)
    clock.now += 3
    error = stream.expired(connected=False)
    assert error.message == f"cannot reach the gateway at gw:1 (3.0 s; timeout_s is 3): {tls}"
    fresh = JobStream(ClientSettings(target="gw:1", timeout_s=3), clock, job_id="j-1")
    clock.now += 3
    probed = fresh.expired(connected=False, connection_error=tls)
    assert probed.message.endswith(f"timeout_s is 3): {tls}")


def test_a_unary_deadline_keeps_the_connection_error() -> None:
    tls = "failed to connect to all addresses; last error: Tls handshake failed"
    deadline = GatewayError("DEADLINE_EXCEEDED", "Deadline Exceeded")
    error = unary_failure(deadline, "gw:1", 3.0, connected=False, connection_error=tls)
    assert error.message == f"cannot reach the gateway at gw:1 (3.0 s of tries): {tls}"
