"""Fail closed: a service without a credential serves only loopback, unless told otherwise.

The gateway (no API keys), the scheduler and the workers (no internal credential) all ask
`refuse_open_off_loopback` before they bind.
"""

from __future__ import annotations

import ipaddress
import logging

from mediamesh.common.settings import ConfigError

log = logging.getLogger("mediamesh.security")


class InsecureBindError(ConfigError):
    """No credential on a non-loopback address without --insecure."""


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback name or address (anything else may be reachable)."""
    if host == "localhost":
        return True
    # An IPv6 address as it is written with a port (`[::1]`), which binds like the bare one.
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def refuse_open_off_loopback(
    *,
    service: str,
    host: str,
    authenticated: bool,
    insecure: bool,
    missing: str,
    setting: str | None = None,
) -> None:
    """Raises InsecureBindError when `service` would serve every caller on a non-loopback
    `host` and `insecure` was not given; warns whenever it serves every caller.

    `missing` names what would authenticate callers, for the message; `setting` the setting
    that gave `host` (`<service>.host` unless said).
    """
    if authenticated:
        return
    if not is_loopback(host):
        if not insecure:
            raise InsecureBindError(
                f"{setting or service + '.host'} {host} is not loopback and {missing}; "
                "configure one, or "
                "pass --insecure to serve without authentication"
            )
        log.warning(
            "INSECURE: the %s on %s accepts EVERY caller (--insecure; %s)", service, host, missing
        )
        return
    log.warning("%s: the %s on %s is OPEN to every local caller", missing, service, host)
