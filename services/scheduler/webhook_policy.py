"""Which webhook URLs the mesh may call: checked when a job is submitted, and again before
each delivery (the allowlist may have changed since).

Only hosts on `webhooks.allowed_hosts` are called, so a request cannot make the scheduler
reach an internal address. Plain http is allowed for loopback hosts only (a receiver on the
same machine); everything else must be https. Redirects are never followed (delivery.py).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from mediamesh.common.errors import FailedPrecondition, InvalidArgument
from mediamesh.common.webhook_settings import WebhookSettings
from mediamesh.scheduler.core.delivery import (
    DEFAULT_WEBHOOK_EVENTS,
    WEBHOOK_EVENTS,
    WebhookTarget,
)

_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def webhook_target(
    url: str, events: list[str], tenant: str, settings: WebhookSettings
) -> WebhookTarget:
    """The request's webhook, checked: INVALID_ARGUMENT naming the field for a URL off the
    allowlist or an unknown event, FAILED_PRECONDITION when the tenant has no secret."""
    if not url:
        raise InvalidArgument("webhook.url: required when webhook is set")
    problem = url_problem(url, settings.allowed_hosts)
    if problem:
        raise InvalidArgument(f"webhook.url: {problem}")
    unknown = [e for e in events if e not in WEBHOOK_EVENTS]
    if unknown:
        raise InvalidArgument(
            f"webhook.events: {unknown[0]!r} is not one of {', '.join(WEBHOOK_EVENTS)}"
        )
    if tenant not in settings.secrets:
        raise FailedPrecondition(
            f"webhook: tenant {tenant!r} has no signing secret (webhooks.secrets.{tenant})"
        )
    chosen = tuple(e for e in WEBHOOK_EVENTS if e in events) or DEFAULT_WEBHOOK_EVENTS
    return WebhookTarget(url, chosen)


def url_problem(url: str, allowed_hosts: list[str]) -> str:
    """Why the mesh may not call `url` ("" when it may)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    host = (parts.hostname or "").lower()
    if parts.scheme not in _DEFAULT_PORTS or not host:
        return "must be an absolute http(s) URL"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials"
    if parts.scheme == "http" and host not in _LOOPBACK_HOSTS:
        return "must use https (plain http only for loopback receivers)"
    port = port or _DEFAULT_PORTS[parts.scheme]
    if not any(_host_matches(entry, host, port) for entry in allowed_hosts):
        return f"host {host!r} is not in webhooks.allowed_hosts"
    return ""


def _host_matches(entry: str, host: str, port: int) -> bool:
    # "[::1]:8080" and "host:8080" name a port; a bare IPv6 address names none.
    name, entry_port = entry, None
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        entry_port = int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    elif entry.count(":") == 1:
        name, _, text = entry.partition(":")
        entry_port = int(text) if text.isdigit() else None
    if entry_port is not None and entry_port != port:
        return False
    if name.startswith("*."):
        return host.endswith(name[1:])
    return host == name
