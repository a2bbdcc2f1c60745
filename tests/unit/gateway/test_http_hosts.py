"""The HTTP face's pure guards: the names a keyless gateway answers to, and the method label
of its request metrics."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from mediamesh.common.errors import PermissionDenied
from mediamesh.gateway.http.origins import CrossSiteGuard, host_name, is_loopback_address
from mediamesh.gateway.http.request_metrics import method_label


def request(host: str | None, server: tuple[str, int] | None = ("127.0.0.1", 8080)) -> Request:
    headers = [(b"host", host.encode())] if host is not None else []
    scope = {"type": "http", "method": "GET", "path": "/", "headers": headers, "server": server}
    return Request(scope)


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("localhost:8080", "localhost"),
        ("LocalHost", "localhost"),
        ("[::1]:8080", "::1"),
        ("[::1]", "::1"),
        ("[::1", ""),
        ("127.0.0.1:1", "127.0.0.1"),
        ("attacker.example:8080", "attacker.example"),
        ("", ""),
    ],
)
def test_the_name_in_a_host_header(host: str, name: str) -> None:
    assert host_name(host) == name


def test_loopback_addresses() -> None:
    for text in ("127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"):
        assert is_loopback_address(text), text
    for text in ("10.0.0.1", "::", "0.0.0.0", "localhost", "::ffff:10.0.0.1", ""):
        assert not is_loopback_address(text), text


def test_a_keyless_gateway_over_loopback_answers_only_its_own_names() -> None:
    guard = CrossSiteGuard(["https://page.example:8443", "*"], keyless=True)
    for host in ("localhost:8080", "127.0.0.1", "[::1]:1", "page.example", "page.example:80"):
        guard.check(request(host))
    for host in ("attacker.example:8080", "localhost.attacker.example", "::1", "", None):
        with pytest.raises(PermissionDenied, match=r"^host: .* without gateway\.api_keys"):
            guard.check(request(host))
    # Reached on another address (an --insecure gateway), any name may be its own.
    guard.check(request("gpu-box:8080", server=("10.0.0.5", 8080)))
    # Over an unknown connection the check holds.
    with pytest.raises(PermissionDenied):
        guard.check(request("attacker.example", server=None))


def test_with_keys_any_name_is_answered() -> None:
    CrossSiteGuard([], keyless=False).check(request("attacker.example:8080"))


def test_unusual_methods_share_one_label() -> None:
    for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        assert method_label(method) == method
    for method in ("FOO1", "PROPFIND", "get", "TRACE"):
        assert method_label(method) == "other"
