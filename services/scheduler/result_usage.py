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

from mediamesh.common.errors import StatusCode
from mediamesh.scheduler.core.interface import RESULT_QUOTA
from mediamesh.scheduler.submissions import Refused


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

    def check(self, tenant: str, quota_bytes: int) -> None:
        """Refuse a new job of a tenant at or over its quota (0: no quota)."""
        held = self.held(tenant)
        if quota_bytes and held >= quota_bytes:
            raise Refused(
                f"result_quota_bytes: tenant {tenant!r} holds {held} bytes of results, at or "
                f"over its quota of {quota_bytes}; delete results it no longer needs "
                "(DeleteJob, DELETE /v1/jobs/{job_id}/record) or wait for their retention",
                code=StatusCode.RESOURCE_EXHAUSTED,
                reason=RESULT_QUOTA,
            )
