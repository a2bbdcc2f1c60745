"""The public listener's bound on calls counts a call from its admission, not from when its
handler starts: gRPC reads a unary request first, and a burst arrives before any handler of
it runs (2000 Watch streams from another process passed a bound of 1000)."""

from __future__ import annotations

import grpc

from mediamesh.common.errors import StatusCode
from mediamesh.common.interceptors import ADMISSION_HOLD_S, CallerGate

SERVICE = "mediamesh.v1.Gateway"


class Details(grpc.HandlerCallDetails):
    method = f"/{SERVICE}/Watch"
    invocation_metadata = ()


def gate_at(now: list[float], max_calls: int) -> CallerGate:
    return CallerGate({SERVICE: None}, max_calls=max_calls, clock=lambda: now[0])


def test_calls_admitted_but_not_yet_running_fill_the_bound() -> None:
    now = [100.0]
    gate = gate_at(now, 3)
    for _ in range(3):
        assert gate.refusal(SERVICE, Details()) is None
        gate.admitted()
    refused = gate.refusal(SERVICE, Details())
    assert refused is not None and refused.code is StatusCode.RESOURCE_EXHAUSTED
    assert refused.message.startswith("max_concurrent_rpcs: 3 calls in progress")
    # Running, a call counts once, not as admitted and running both.
    gate.started()
    assert gate.in_progress() == 3
    gate.ended()
    assert gate.in_progress() == 2 and gate.refusal(SERVICE, Details()) is None


def test_a_call_that_never_runs_gives_its_place_back() -> None:
    now = [100.0]
    gate = gate_at(now, 1)
    gate.admitted()  # its client left before sending the request: no handler will run
    assert gate.refusal(SERVICE, Details()) is not None
    now[0] += ADMISSION_HOLD_S + 0.001
    assert gate.refusal(SERVICE, Details()) is None
    # A handler that starts after its admission expired still counts while it runs.
    gate.started()
    assert gate.in_progress() == 1
    gate.ended()
    assert gate.in_progress() == 0
