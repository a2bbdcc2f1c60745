"""Webhooks: the `webhooks` section of the mesh config (allowlist, secrets, retry policy)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from mediamesh.common.tenants import TENANT_PATTERN, is_tenant_name


class WebhookSettings(BaseModel):
    """Who the scheduler may call back, how deliveries are signed, and how they are retried."""

    model_config = ConfigDict(extra="forbid")

    # Hosts a webhook URL may name: "hooks.example.com", "*.example.com" (any subdomain), or
    # "host:port" to allow one port only. Empty: every webhook is refused.
    allowed_hosts: list[str] = Field(default_factory=list)
    # The HMAC-SHA256 signing secret of each tenant; a tenant without one cannot use webhooks.
    secrets: dict[str, SecretStr] = Field(default_factory=dict)
    # Attempts per delivery before it is given up (recorded as failed in the store).
    max_attempts: int = Field(12, ge=1)
    # Wait before the second attempt; it doubles after each failure, up to max_backoff_s.
    first_backoff_s: float = Field(1.0, gt=0)
    max_backoff_s: float = Field(600.0, gt=0)
    # One attempt's limit, connecting included.
    timeout_s: float = Field(10.0, gt=0)
    # Deliveries in flight at once, over all receivers.
    max_concurrent: int = Field(16, ge=1)

    @field_validator("secrets", mode="after")
    @classmethod
    def _tenant_names(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        bad = [name for name in value if not is_tenant_name(name)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a tenant name (pattern {TENANT_PATTERN})")
        return value

    @field_validator("allowed_hosts", mode="after")
    @classmethod
    def _lowercase_hosts(cls, value: list[str]) -> list[str]:
        return [host.strip().lower() for host in value if host.strip()]
