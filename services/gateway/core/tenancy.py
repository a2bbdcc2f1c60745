"""Who is calling and what they may do: API keys, tenants, quotas and request rates.

Pure: keys are compared by SHA-256 digest, the clock is passed in.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from mediamesh.common.errors import PermissionDenied, ResourceExhausted, Unauthenticated
from mediamesh.common.generation import Priority
from mediamesh.common.settings import ApiKeySettings, GatewaySettings, TenantSettings
from mediamesh.common.tenants import ADMIN_SCOPE

OPEN_TENANT = "default"


def hash_key(key: str) -> str:
    """The hex SHA-256 digest of an API key, the form keys are configured and compared in."""
    return hashlib.sha256(key.encode()).hexdigest()


class Prepaid:
    """Submissions already charged to a tenant's rate as one, for `Tenancy.admitted`."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.left = jobs

    def spend(self, jobs: int) -> bool:
        """Whether `jobs` of the prepaid submissions were left (and are now spent)."""
        if jobs > self.left:
            return False
        self.left -= jobs
        return True


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: its tenant, that tenant's quota, and whether its key carries
    the admin scope (every tenant's jobs are visible to it, not only its own). `prepaid`:
    submissions of the current request already charged, within `Tenancy.admitted`;
    `trace_metadata`: the request's trace context, to forward."""

    tenant: str
    quota: TenantSettings
    admin: bool = False
    prepaid: Prepaid | None = field(default=None, compare=False, repr=False)
    # The caller's trace (W3C `traceparent`) for the gateway to pass on when it does not
    # trace itself (`common.telemetry.forwarded_trace`).
    trace_metadata: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)


class TokenBucket:
    """`rate` tokens per second up to `burst`; one request takes one token."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens = float(burst)
        self.updated = clock()

    def take(self, count: int = 1) -> float:
        """0 when `count` tokens were taken, else seconds until they are available.
        ValueError for more than the burst: the bucket never holds that many, so no wait
        would be enough (callers refuse such a request before asking)."""
        if count > self.burst:
            raise ValueError(f"{count} tokens asked of a bucket that holds at most {self.burst}")
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= count:
            self.tokens -= count
            return 0.0
        return (count - self.tokens) / self.rate

    def give_back(self, count: int) -> None:
        """Returns what `take(count)` took, up to the burst."""
        self.tokens = min(self.burst, self.tokens + count)


class Tenancy:
    """Authenticates API keys and enforces each tenant's quota: models, priority and rates.

    With no API keys configured the gateway is open: every call is tenant `default`. Rate buckets
    are per tenant and live as long as this object.
    """

    def __init__(self, settings: GatewaySettings, clock: Callable[[], float]) -> None:
        self._keys: dict[str, ApiKeySettings] = {k.sha256: k for k in settings.api_keys}
        self._tenants = dict(settings.tenants)
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._read_buckets: dict[str, TokenBucket] = {}
        self.open = not self._keys

    def authenticate(self, authorization: str | None) -> Caller:
        """The caller for an `authorization` header (`Bearer <key>`); UNAUTHENTICATED when it is
        missing, malformed or names an unknown key. Always the open tenant when open."""
        if self.open:
            return Caller(OPEN_TENANT, self._tenants.get(OPEN_TENANT, TenantSettings()))
        if not authorization:
            raise Unauthenticated("authorization: missing; send 'authorization: Bearer <key>'")
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthenticated("authorization: expected 'Bearer <key>'")
        digest = hash_key(key.strip())
        entry = next((k for h, k in self._keys.items() if hmac.compare_digest(h, digest)), None)
        if entry is None:
            raise Unauthenticated("authorization: unknown API key")
        quota = self._tenants.get(entry.tenant, TenantSettings())
        return Caller(entry.tenant, quota, admin=ADMIN_SCOPE in entry.scopes)

    def caller_of(self, tenant: str) -> Caller:
        """A caller for `tenant` without a key: what a signed result link stands for."""
        return Caller(tenant, self._tenants.get(tenant, TenantSettings()))

    def admit(
        self,
        caller: Caller,
        model: str,
        priority: Priority,
        jobs: int = 1,
        counted_by: str = "jobs",
    ) -> None:
        """Checks model access, priority ceiling and request rate before submitting `jobs`;
        jobs the caller prepaid (`admitted`) take nothing more of the rate. `counted_by` is
        the request field that set `jobs` (OpenAI's `n`), which a refusal of too many names."""
        quota = caller.quota
        if quota.allowed_models and model not in quota.allowed_models:
            raise PermissionDenied(
                f"model: tenant {caller.tenant!r} may not use {model!r}; "
                f"allowed: {', '.join(quota.allowed_models)}"
            )
        ceiling = Priority[quota.highest_priority]
        if priority < ceiling:
            raise PermissionDenied(
                f"priority: {priority.name} is above tenant {caller.tenant!r}'s highest "
                f"allowed priority {ceiling.name}"
            )
        if caller.prepaid is not None and caller.prepaid.spend(jobs):
            return
        self.check_rate(caller, jobs, counted_by)

    @contextmanager
    def admitted(
        self, caller: Caller, model: str, priority: Priority, jobs: int, counted_by: str = "jobs"
    ) -> Iterator[Caller]:
        """Admits `jobs` submissions at once, all or none, and yields the caller to submit
        them as: its `admit`s take from what was charged here instead of the rate.

        Charging one job at a time would let a request refused at its k-th job leave the first
        k - 1 running, answered to no one. If none was submitted by the end (the first was
        refused as invalid before its admission), the charge is given back: a request that
        made no job costs no rate, as a lone refused job does not."""
        self.admit(caller, model, priority, jobs, counted_by)
        prepaid = Prepaid(jobs)
        try:
            yield replace(caller, prepaid=prepaid)
        finally:
            if prepaid.left == prepaid.jobs:
                self._submit_bucket(caller).give_back(jobs)
            # Spent: the caller cannot outlive the request and submit on this charge again.
            prepaid.left = 0

    def check_rate(self, caller: Caller, jobs: int = 1, counted_by: str = "jobs") -> None:
        """Takes `jobs` tokens of the tenant's submit budget, or RESOURCE_EXHAUSTED: with the
        wait until they are free, or with none when `jobs` is over the tenant's burst."""
        quota = caller.quota
        if jobs > quota.burst:
            # Charging only the burst would let one request make more jobs than the rate
            # allows; waiting would not help either, as the bucket never holds more: no wait.
            raise ResourceExhausted(
                f"{counted_by}: this request asks for {jobs} jobs at once, more than tenant "
                f"{caller.tenant!r}'s burst of {quota.burst}, so it can never be admitted; "
                f"ask for at most {quota.burst} in one request"
            )
        wait = self._submit_bucket(caller).take(jobs)
        if wait > 0:
            together = f"; this request asks for {jobs} jobs at once" if jobs > 1 else ""
            raise ResourceExhausted(
                f"rate: tenant {caller.tenant!r} is over {quota.requests_per_second} "
                f"requests per second (burst {quota.burst}) at this gateway{together}",
                retry_after_s=wait,
            )

    def check_read(self, caller: Caller) -> None:
        """Takes one token of the tenant's read budget (calls that make no job), or
        RESOURCE_EXHAUSTED with the wait until one is free."""
        quota = caller.quota
        bucket = self._bucket(
            self._read_buckets, caller.tenant, quota.reads_per_second, quota.read_burst
        )
        wait = bucket.take()
        if wait > 0:
            raise ResourceExhausted(
                f"read rate: tenant {caller.tenant!r} is over {quota.reads_per_second} "
                f"reads per second (burst {quota.read_burst}) at this gateway",
                retry_after_s=wait,
            )

    def _submit_bucket(self, caller: Caller) -> TokenBucket:
        quota = caller.quota
        return self._bucket(self._buckets, caller.tenant, quota.requests_per_second, quota.burst)

    def _bucket(
        self, buckets: dict[str, TokenBucket], tenant: str, rate: float, burst: int
    ) -> TokenBucket:
        bucket = buckets.get(tenant)
        if bucket is None:
            bucket = buckets[tenant] = TokenBucket(rate, burst, self._clock)
        return bucket
