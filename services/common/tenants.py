"""Tenant names: one pattern, checked where keys are configured and again at the scheduler.

A tenant name is never empty, so no code can read "" as "every tenant": seeing other
tenants' jobs takes the explicit admin scope a credential carries.
"""

from __future__ import annotations

import re

from mediamesh.common.errors import InvalidArgument

# Lowercase, starts with a letter or digit, at most 63 characters: safe in metric labels,
# log lines and file names alike.
TENANT_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
_TENANT = re.compile(TENANT_PATTERN)

# What a key may carry besides its tenant: `admin` sees and acts on every tenant's jobs.
ADMIN_SCOPE = "admin"


def is_tenant_name(name: str) -> bool:
    """Whether `name` is a valid tenant name."""
    return _TENANT.fullmatch(name) is not None


def checked_tenant(name: str, field: str = "tenant") -> str:
    """`name` if it is a valid tenant name; otherwise InvalidArgument naming `field`."""
    if not is_tenant_name(name):
        raise InvalidArgument(
            f"{field}: {name[:80]!r} is not a tenant name (pattern {TENANT_PATTERN})"
        )
    return name
