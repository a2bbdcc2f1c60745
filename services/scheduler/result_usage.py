"""Bytes of stored results per tenant, for the tenant's result quota.

Retention bounds how long results stay, not how many bytes a tenant keeps: one tenant's
batch of long videos could fill the artifact store every tenant shares. The gateway sends
each tenant's `result_quota_bytes` with its submits; while the tenant holds that many bytes
of results (every stored result within retention, counted when its job succeeds, taken
off when the job is deleted or its retention ends), its new jobs are refused
RESOURCE_EXHAUSTED. Jobs already accepted still finish, so the quota is a bound to within
what the tenant had queued when it was reached.
"""

from __future__ import annotations

from collections import Counter


class ResultUsage:
    """Result bytes each tenant holds in the artifact store."""

    def __init__(self) -> None:
        self._bytes: Counter[str] = Counter()

    def loaded(self, by_tenant: dict[str, int]) -> None:
        """What the store holds, read at start."""
        self._bytes = Counter(by_tenant)

    def added(self, tenant: str, size_bytes: int) -> None:
        self._bytes[tenant] += size_bytes

    def removed(self, tenant: str, size_bytes: int) -> None:
        left = self._bytes[tenant] - size_bytes
        if left > 0:
            self._bytes[tenant] = left
        else:
            del self._bytes[tenant]

    def held(self, tenant: str) -> int:
        return self._bytes.get(tenant, 0)

    def by_tenant(self) -> dict[str, int]:
        """Every tenant holding results, and how many bytes."""
        return {tenant: held for tenant, held in self._bytes.items() if held > 0}

    def over_quota(self, tenant: str, quota_bytes: int) -> bool:
        """Whether the tenant holds its quota or more (a quota of 0: no quota)."""
        return bool(quota_bytes) and self.held(tenant) >= quota_bytes
