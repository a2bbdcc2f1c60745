"""A request of more jobs than its tenant's burst is refused whole, at once and for good; one
within the burst is charged every job it makes."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import ResourceExhausted
from mediamesh.common.generation import Priority
from mediamesh.common.settings import GatewaySettings
from mediamesh.gateway.core.tenancy import Tenancy, TokenBucket, hash_key


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tenancy_with_burst(burst: int, clock: Clock) -> Tenancy:
    settings = GatewaySettings(
        api_keys=[{"sha256": hash_key("key-a"), "tenant": "a"}],
        tenants={"a": {"requests_per_second": 1, "burst": burst}},
    )
    return Tenancy(settings, clock)


def test_more_jobs_than_the_burst_are_refused_without_a_wait_naming_the_field():
    clock = Clock()
    tenancy = tenancy_with_burst(1, clock)
    caller = tenancy.authenticate("Bearer key-a")
    with (
        pytest.raises(ResourceExhausted) as caught,
        tenancy.admitted(caller, "echo", Priority.STANDARD, 10, "n"),
    ):
        pytest.fail("ten jobs admitted against a burst of one")
    message = caught.value.message
    assert message.startswith("n: ") and "10 jobs" in message and "burst of 1" in message
    # No wait would help: the bucket never holds ten tokens.
    assert caught.value.retry_after_s == 0
    # Nothing was charged: the tenant's one token is still there.
    tenancy.admit(caller, "echo", Priority.STANDARD)


def test_the_kserve_path_names_its_jobs_by_default():
    tenancy = tenancy_with_burst(2, Clock())
    caller = tenancy.authenticate("Bearer key-a")
    with pytest.raises(ResourceExhausted, match=r"^jobs: this request asks for 3 jobs"):
        tenancy.admit(caller, "echo", Priority.STANDARD, jobs=3)


def test_a_request_within_the_burst_pays_for_every_job():
    clock = Clock()
    tenancy = tenancy_with_burst(3, clock)
    caller = tenancy.authenticate("Bearer key-a")
    with tenancy.admitted(caller, "echo", Priority.STANDARD, 3, "n") as paid:
        tenancy.admit(paid, "echo", Priority.STANDARD)
    with pytest.raises(ResourceExhausted) as caught:
        tenancy.admit(caller, "echo", Priority.STANDARD)
    assert caught.value.retry_after_s == pytest.approx(1.0)


def test_a_bucket_refuses_to_take_more_than_it_can_hold():
    bucket = TokenBucket(rate=1.0, burst=4, clock=Clock())
    with pytest.raises(ValueError, match="at most 4"):
        bucket.take(5)
    assert bucket.take(4) == 0
