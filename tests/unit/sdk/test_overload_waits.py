"""retry_on_overload waits the gateway's hint plus a growing random part, bounded by time:
callers refused together against a tenant's rate spread out and all get in within the
README's bound, rather than all coming back for the same token and running out of tries."""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator

import pytest

from mediamesh.common.errors import StatusCode
from mediamesh.gateway.core.tenancy import TokenBucket
from mediamesh.sdk import GatewayError
from mediamesh.sdk.flow import OVERLOAD_SPREAD_MAX_S, overload_wait
from mediamesh.sdk.options import ClientSettings

PATIENT = ClientSettings(retry_on_overload=True)


@pytest.fixture
def seeded_random() -> Iterator[None]:
    """The global generator overload_wait draws from, given back as it was afterwards."""
    state = random.getstate()
    yield
    random.setstate(state)


def refused(hint_s: float) -> GatewayError:
    return GatewayError(StatusCode.RESOURCE_EXHAUSTED, "rate: tenant 'a' is over", hint_s)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def last_admission_s(callers: int, rate: float, burst: int) -> float:
    """When the last of `callers` submitting at once is admitted by a bucket of `rate` and
    `burst`, each waiting as overload_wait says; fails if one gives up."""
    clock = Clock()
    bucket = TokenBucket(rate, burst, clock)
    # (when it submits, caller, retries so far, seconds waited so far)
    pending = [(0.0, caller, 0, 0.0) for caller in range(callers)]
    last = 0.0
    while pending:
        clock.now, caller, retries, waited_s = heapq.heappop(pending)
        hint = bucket.take()
        if hint == 0:
            last = clock.now
            continue
        wait = overload_wait(refused(hint), retries, waited_s, PATIENT)
        assert wait is not None, f"caller {caller} gave up after {retries} retries"
        assert hint <= wait <= hint + OVERLOAD_SPREAD_MAX_S
        heapq.heappush(pending, (clock.now + wait, caller, retries + 1, waited_s + wait))
    return last


@pytest.mark.parametrize(
    ("callers", "rate", "burst"), [(30, 10, 10), (100, 10, 10), (30, 5, 1), (40, 2, 1)]
)
@pytest.mark.usefixtures("seeded_random")
def test_a_burst_of_concurrent_submits_all_get_in_within_the_documented_bound(
    callers: int, rate: float, burst: int
) -> None:
    for seed in range(20):
        random.seed(seed)
        took = last_admission_s(callers, rate, burst)
        assert took <= 1.25 * (callers - burst) / rate + 1, (seed, took)


def test_waits_stop_where_max_overload_wait_s_would_be_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = ClientSettings(retry_on_overload=True, max_overload_wait_s=2)
    assert overload_wait(refused(3), 0, 0, settings) is None  # a hint longer than all
    assert overload_wait(refused(0.5), 0, 1.6, settings) is None  # past it with this one
    # The largest random part: one under 0.1, drawn one time in five, leaves the wait short
    # of what is left.
    monkeypatch.setattr(random, "uniform", lambda low, high: high)
    assert overload_wait(refused(0.3), 9, 1.6, settings) == pytest.approx(0.4)  # what is left


def test_a_thousand_retries_in_a_long_allowance_still_give_a_wait() -> None:
    """The random part doubles per retry up to its cap; 2**1100 alone overflows a float."""
    settings = ClientSettings(retry_on_overload=True, max_overload_wait_s=10_000)
    wait = overload_wait(refused(0.05), 1100, 300, settings)
    assert wait is not None and 0.05 <= wait <= 0.55


def test_only_an_over_limit_answer_with_a_hint_is_waited_out_and_only_when_asked() -> None:
    assert overload_wait(refused(0.1), 0, 0, ClientSettings()) is None
    assert overload_wait(refused(0), 0, 0, PATIENT) is None  # no wait lifts it
    unavailable = GatewayError(StatusCode.UNAVAILABLE, "down", 0.1)
    assert overload_wait(unavailable, 0, 0, PATIENT) is None
    capped = ClientSettings(retry_on_overload=True, overload_retries=2)
    assert overload_wait(refused(0.1), 1, 0, capped) is not None
    assert overload_wait(refused(0.1), 2, 0, capped) is None
