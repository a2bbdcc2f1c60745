"""Who is calling and what they may do: API keys, tenants, quotas and request rates.

Pure: keys are compared by SHA-256 digest, the clock is passed in.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass

from mediamesh.common.errors import PermissionDenied, ResourceExhausted, Unauthenticated
from mediamesh.common.generation import Priority
from mediamesh.common.settings import GatewaySettings, TenantSettings

OPEN_TENANT = "default"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Caller:
    tenant: str
    quota: TenantSettings


class TokenBucket:
    """`rate` tokens per second up to `burst`; one request takes one token."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens = float(burst)
        self.updated = clock()

    def take(self, count: int = 1) -> float:
        """0 when `count` tokens were taken, else seconds until they are available."""
        # More than the burst could never be granted; the whole bucket is the most one call pays.
        count = min(count, self.burst)
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= count:
            self.tokens -= count
            return 0.0
        return (count - self.tokens) / self.rate


class Tenancy:
    def __init__(self, settings: GatewaySettings, clock: Callable[[], float]) -> None:
        self._keys = {k.sha256: k.tenant for k in settings.api_keys}
        self._tenants = dict(settings.tenants)
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self.open = not self._keys

    def authenticate(self, authorization: str | None) -> Caller:
        if self.open:
            return Caller(OPEN_TENANT, self._tenants.get(OPEN_TENANT, TenantSettings()))
        if not authorization:
            raise Unauthenticated("authorization: missing; send 'authorization: Bearer <key>'")
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthenticated("authorization: expected 'Bearer <key>'")
        digest = hash_key(key.strip())
        tenant = next((t for h, t in self._keys.items() if hmac.compare_digest(h, digest)), None)
        if tenant is None:
            raise Unauthenticated("authorization: unknown API key")
        return Caller(tenant, self._tenants.get(tenant, TenantSettings()))

    def admit(self, caller: Caller, model: str, priority: Priority, jobs: int = 1) -> None:
        """Checks model access, priority ceiling and request rate before submitting `jobs`."""
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
        self.check_rate(caller, jobs)

    def check_rate(self, caller: Caller, jobs: int = 1) -> None:
        bucket = self._buckets.get(caller.tenant)
        if bucket is None:
            bucket = TokenBucket(caller.quota.requests_per_second, caller.quota.burst, self._clock)
            self._buckets[caller.tenant] = bucket
        wait = bucket.take(jobs)
        if wait > 0:
            raise ResourceExhausted(
                f"rate: tenant {caller.tenant!r} is over {caller.quota.requests_per_second} "
                f"requests per second (burst {caller.quota.burst})",
                retry_after_s=wait,
            )
