"""API keys, tenants and quotas, with a fake clock."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import PermissionDenied, ResourceExhausted, Unauthenticated
from mediamesh.common.generation import Priority
from mediamesh.common.settings import GatewaySettings
from mediamesh.gateway.core.tenancy import OPEN_TENANT, Tenancy, TokenBucket, hash_key


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def settings(**tenant: object) -> GatewaySettings:
    return GatewaySettings(
        api_keys=[{"sha256": hash_key("key-a"), "tenant": "a"}],
        tenants={"a": tenant},
    )


def test_no_keys_is_open_with_the_default_tenant():
    tenancy = Tenancy(GatewaySettings(), Clock())
    assert tenancy.open and tenancy.authenticate(None).tenant == OPEN_TENANT


@pytest.mark.parametrize(
    ("header", "words"),
    [(None, "missing"), ("Basic abc", "Bearer"), ("Bearer ", "Bearer"), ("Bearer nope", "unknown")],
)
def test_keys_are_required_and_checked(header, words):
    with pytest.raises(Unauthenticated) as caught:
        Tenancy(settings(), Clock()).authenticate(header)
    assert words in caught.value.message


def test_a_key_maps_to_its_tenant():
    assert Tenancy(settings(), Clock()).authenticate("Bearer key-a").tenant == "a"


def test_model_and_priority_ceiling_are_permissions():
    tenancy = Tenancy(settings(allowed_models=["echo"], highest_priority="STANDARD"), Clock())
    caller = tenancy.authenticate("bearer key-a")
    tenancy.admit(caller, "echo", Priority.BATCH)
    with pytest.raises(PermissionDenied, match="may not use 'flux-tiny'"):
        tenancy.admit(caller, "flux-tiny", Priority.BATCH)
    with pytest.raises(PermissionDenied, match="REALTIME is above"):
        tenancy.admit(caller, "echo", Priority.REALTIME)


def test_rate_limit_answers_with_the_wait_and_refills():
    clock = Clock()
    tenancy = Tenancy(settings(requests_per_second=2, burst=2), clock)
    caller = tenancy.authenticate("Bearer key-a")
    tenancy.admit(caller, "echo", Priority.STANDARD)
    tenancy.admit(caller, "echo", Priority.STANDARD)
    with pytest.raises(ResourceExhausted) as caught:
        tenancy.admit(caller, "echo", Priority.STANDARD)
    assert caught.value.retry_after_s == pytest.approx(0.5)
    # Each gateway keeps its own bucket: the refusal says so (README, API keys and tenants).
    assert caught.value.message.endswith("(burst 2) at this gateway")
    clock.now += 0.5
    tenancy.admit(caller, "echo", Priority.STANDARD)


def test_a_call_of_several_jobs_takes_one_token_per_job():
    clock = Clock()
    bucket = TokenBucket(rate=1.0, burst=4, clock=clock)
    assert bucket.take(3) == 0
    assert bucket.take(3) == pytest.approx(2.0)
    clock.now += 2
    assert bucket.take(3) == 0


def test_reads_have_their_own_budget_that_answers_with_the_wait():
    clock = Clock()
    tenancy = Tenancy(
        settings(requests_per_second=1, burst=1, reads_per_second=4, read_burst=2), clock
    )
    caller = tenancy.authenticate("Bearer key-a")
    tenancy.check_read(caller)
    tenancy.check_read(caller)
    with pytest.raises(ResourceExhausted) as caught:
        tenancy.check_read(caller)
    assert caught.value.retry_after_s == pytest.approx(0.25)
    assert (
        "read rate" in caught.value.message and "burst 2) at this gateway" in caught.value.message
    )
    # Reads spent nothing of the submit budget, and submits spend nothing of the reads'.
    tenancy.admit(caller, "echo", Priority.STANDARD)
    clock.now += 0.25
    tenancy.check_read(caller)


def test_jobs_admitted_together_are_charged_once_all_or_none():
    clock = Clock()
    tenancy = Tenancy(settings(requests_per_second=1, burst=3, highest_priority="STANDARD"), clock)
    caller = tenancy.authenticate("Bearer key-a")
    with tenancy.admitted(caller, "echo", Priority.STANDARD, 2) as paid:
        # Each job's own admission takes from the charge, not from the rate again.
        tenancy.admit(paid, "echo", Priority.STANDARD)
        tenancy.admit(paid, "echo", Priority.STANDARD)
    over = r"\(burst 3\) at this gateway; this request asks for 2 jobs"
    with (
        pytest.raises(ResourceExhausted, match=over),
        tenancy.admitted(caller, "echo", Priority.STANDARD, 2),
    ):
        pytest.fail("admitted over the rate")
    # The permissions still hold for each job of a charge.
    with (
        tenancy.admitted(caller, "echo", Priority.STANDARD, 1) as paid,
        pytest.raises(PermissionDenied, match="REALTIME is above"),
    ):
        tenancy.admit(paid, "echo", Priority.REALTIME)
    # That charge made no job, so it was given back; the last token is still there.
    tenancy.admit(caller, "echo", Priority.STANDARD)


def test_a_charge_is_kept_once_a_job_was_admitted_and_is_spent_at_its_end():
    clock = Clock()
    tenancy = Tenancy(settings(requests_per_second=1, burst=3), clock)
    caller = tenancy.authenticate("Bearer key-a")
    with tenancy.admitted(caller, "echo", Priority.STANDARD, 2) as paid:
        tenancy.admit(paid, "echo", Priority.STANDARD)
    # One token left, and the charge's unused job cannot be spent after the request.
    tenancy.admit(paid, "echo", Priority.STANDARD)
    with pytest.raises(ResourceExhausted):
        tenancy.admit(paid, "echo", Priority.STANDARD)
