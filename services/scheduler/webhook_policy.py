"""Which webhook URLs the mesh may call: checked when a job is submitted, and again before
each delivery (the allowlist may have changed since).

Only hosts on `webhooks.allowed_hosts` are called, so a request cannot make the scheduler
reach an internal address. Plain http is allowed for loopback hosts only (a receiver on the
same machine); everything else must be https. Redirects are never followed (delivery.py).

A name is not an address: `*.partner.io` allows whatever the partner's DNS says, 10.0.0.8 or
169.254.169.254 included. So before each attempt the host is resolved and every address it
resolves to must be public (`address_problem`): private, loopback, link-local, shared,
multicast, reserved and unspecified addresses are refused, IPv4 inside IPv6 (mapped, 6to4,
NAT64, Teredo) judged as the IPv4 it carries, unless the allowlist entry the URL matched
names that very IP ("10.0.0.8:9000"), or is a loopback entry ("localhost", "127.0.0.1",
"::1") and the address is loopback. The attempt then connects to the addresses checked, never
to a second answer of the DNS (webhook_delivery.py pins them).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
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
    if not matching_entries(host, port, allowed_hosts):
        return f"host {host!r} is not in webhooks.allowed_hosts"
    return ""


def host_and_port(url: str) -> tuple[str, int]:
    """The host (lowercase, IPv6 without brackets) and port a URL that passed `url_problem`
    connects to."""
    parts = urlsplit(url)
    return (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS[parts.scheme]


def matching_entries(host: str, port: int, allowed_hosts: list[str]) -> list[str]:
    """The names of the allowlist entries that allow `host` on `port`."""
    found = []
    for entry in allowed_hosts:
        name = _entry_name(entry, port)
        if name is not None and _name_matches(name, host):
            found.append(name)
    return found


def address_problem(host: str, entries: Iterable[str], addresses: Iterable[str]) -> str:
    """Why the mesh may not connect to `addresses`, what `host` resolved to, when the URL
    matched the allowlist `entries` ("" when it may: every address is public, or named by an
    entry as its literal IP, or loopback under a loopback entry)."""
    named = list(entries)
    literal = {ip for ip in (_ip(entry) for entry in named) if ip is not None}
    loopback_entry = any(entry in _LOOPBACK_HOSTS for entry in named)
    checked = 0
    for text in addresses:
        checked += 1
        ip = _ip(text)
        if ip is None:
            return f"host {host!r} resolved to {text!r}, which is not an IP address"
        kind = _non_public(ip)
        if not kind or ip in literal:
            continue
        if kind == "loopback" and loopback_entry:
            continue
        return (
            f"host {host!r} resolved to {ip}, a {kind} address; webhooks go to public addresses "
            "only, unless webhooks.allowed_hosts names that IP itself"
        )
    if not checked:
        return f"host {host!r} resolved to no address"
    return ""


def _non_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """What kind of non-public address `ip` is ("" for a public one). An IPv6 address that
    carries an IPv4 one is judged by that too: ::ffff:127.0.0.1 is loopback."""
    if isinstance(ip, ipaddress.IPv6Address):
        for inner in _embedded_ipv4(ip):
            if kind := _non_public(inner):
                return kind
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return "site-local"  # fec0::/10: deprecated, yet still routed inside some sites
    if ip in _LOCAL_NAT64:
        return "private"  # whatever it carries, it is translated by the site's own NAT64
    if ip.is_multicast:
        return "multicast"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private:
        return "private"
    if not ip.is_global:
        return "non-global"  # shared (100.64/10) and the like
    return ""


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# RFC 8215's local-use translation prefix: a site's own NAT64, which reaches its own network.
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")
# IPv4-compatible addresses (::a.b.c.d, deprecated): some stacks still carry them to IPv4.
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    found = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.append(ip.teredo[1])
    compatible = ip in _IPV4_COMPATIBLE and not (ip.is_loopback or ip.is_unspecified)
    if ip in _NAT64 or compatible:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        # A zone ("fe80::1%eth0") from getaddrinfo: the address is what is judged.
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _entry_name(entry: str, port: int) -> str | None:
    """The host name of an allowlist entry, None when it names another port than `port`."""
    # "[::1]:8080" and "host:8080" name a port; a bare IPv6 address names none.
    name, entry_port = entry, None
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        entry_port = int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    elif entry.count(":") == 1:
        name, _, text = entry.partition(":")
        entry_port = int(text) if text.isdigit() else None
    if entry_port is not None and entry_port != port:
        return None
    return name


def _name_matches(name: str, host: str) -> bool:
    if name.startswith("*."):
        return host.endswith(name[1:])
    return host == name
