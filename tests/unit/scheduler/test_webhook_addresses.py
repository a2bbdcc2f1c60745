"""The webhook allowlist names hosts; what a host resolves to is checked at each attempt: a
name (a wildcard's above all) that resolves to a private, loopback, link-local or otherwise
non-public address is refused, as a failed attempt that says why, unless the entry names that
IP itself or is a loopback entry. The attempt connects to the addresses checked, never to a
second DNS answer."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest
from pydantic import SecretStr

from mediamesh.common.webhook_settings import WebhookSettings
from mediamesh.scheduler.store.artifacts import LocalArtifactStore
from mediamesh.scheduler.store.deliveries import DeliveryStatus, WebhookDelivery
from mediamesh.scheduler.store.writer import StoreWriter
from mediamesh.scheduler.webhook_delivery import WebhookDeliverer
from mediamesh.scheduler.webhook_policy import address_problem, matching_entries
from mediamesh.scheduler.webhook_transport import PinnedBackend, pinned
from tests.webhook_receiver import Receiver

PUBLIC = ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("10.0.0.8", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("127.0.0.1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "non-global"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("fe80::1%eth0", "link-local"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:169.254.169.254", "link-local"),
        ("2002:a00:8::", "private"),  # 6to4 of 10.0.0.8
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
        ("64:ff9b:1::5db8:d822", "private"),  # the local-use NAT64 prefix, public IPv4 inside
        ("::7f00:1", "loopback"),  # IPv4-compatible 127.0.0.1
        ("fec0::1", "site-local"),
    ],
)
def test_a_wildcard_name_resolving_to_a_non_public_address_is_refused(
    address: str, kind: str
) -> None:
    entries = matching_entries("a.partner.io", 443, ["*.partner.io"])
    assert entries == ["*.partner.io"]
    problem = address_problem("a.partner.io", entries, [address])
    assert problem.startswith("host 'a.partner.io' resolved to ")
    assert f"a {kind} address" in problem
    assert "webhooks.allowed_hosts names that IP itself" in problem
    # So is an exact name: its owner's DNS decides where it points as well.
    assert address_problem("hooks.example.com", ["hooks.example.com"], [address])


def test_public_addresses_pass_and_one_bad_answer_among_good_ones_refuses() -> None:
    assert address_problem("a.partner.io", ["*.partner.io"], PUBLIC) == ""
    assert "private" in address_problem("a.partner.io", ["*.partner.io"], [*PUBLIC, "10.1.1.1"])
    assert "resolved to no address" in address_problem("a.partner.io", ["*.partner.io"], [])
    assert "not an IP address" in address_problem("x", ["x"], ["not-an-ip"])


def test_an_entry_naming_the_ip_or_a_loopback_entry_allows_what_it_names() -> None:
    # The literal IP, configured by the operator: that address, and no other.
    assert address_problem("10.0.0.8", ["10.0.0.8"], ["10.0.0.8"]) == ""
    assert address_problem("127.0.0.1", ["127.0.0.1"], ["127.0.0.1"]) == ""
    assert address_problem("::1", ["::1"], ["::1"]) == ""
    assert "private" in address_problem("10.0.0.8", ["10.0.0.8"], ["10.0.0.9"])
    # "localhost": loopback addresses, not the private network.
    assert address_problem("localhost", ["localhost"], ["127.0.0.1", "::1"]) == ""
    assert "private" in address_problem("localhost", ["localhost"], ["10.0.0.8"])
    assert "link-local" in address_problem("localhost", ["localhost"], ["169.254.169.254"])


def test_matching_entries_respect_ports() -> None:
    allowed = ["*.partner.io", "127.0.0.1:8123", "[::1]:9000", "localhost:7000"]
    assert matching_entries("127.0.0.1", 8123, allowed) == ["127.0.0.1"]
    assert matching_entries("127.0.0.1", 8124, allowed) == []
    assert matching_entries("::1", 9000, allowed) == ["::1"]
    assert matching_entries("localhost", 7000, allowed) == ["localhost"]
    assert matching_entries("a.partner.io", 8443, allowed) == ["*.partner.io"]


# ---- at delivery ------------------------------------------------------------------------


def deliverer(writer: StoreWriter, tmp_path: Path, allowed: list[str]) -> WebhookDeliverer:
    settings = WebhookSettings(
        allowed_hosts=allowed, secrets={"acme": SecretStr("s")}, max_attempts=1, timeout_s=5.0
    )
    return WebhookDeliverer(settings, writer, LocalArtifactStore(tmp_path / "artifacts"))


def delivery(url: str) -> WebhookDelivery:
    return WebhookDelivery(
        delivery_id="d-1",
        job_id="job-1",
        tenant="acme",
        url=url,
        event="completed",
        payload="{}",
        created_at=time.time(),
        next_attempt_at=time.time(),
    )


async def finished(hook: WebhookDelivery) -> WebhookDelivery:
    for _ in range(200):
        if hook.status is not DeliveryStatus.PENDING:
            return hook
        await asyncio.sleep(0.05)
    raise AssertionError(f"still pending: {hook}")


async def test_a_delivery_to_a_name_resolving_to_the_metadata_service_is_a_failed_attempt(
    writer: StoreWriter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[httpx.Request] = []

    async def metadata_service(host: str, port: int) -> list[str]:
        assert (host, port) == ("evil.partner.io", 443)
        return ["169.254.169.254"]

    hooks = deliverer(writer, tmp_path, ["*.partner.io"])
    monkeypatch.setattr(hooks, "resolve", metadata_service)
    hooks._client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(200))
    )
    hook = delivery("https://evil.partner.io/hook")
    try:
        hooks.start([hook])
        await finished(hook)
    finally:
        await hooks.close()
    assert not sent, "nothing may be sent to an address the policy refuses"
    assert hook.status is DeliveryStatus.FAILED and hook.attempts == 1
    assert hook.last_error == (
        "host 'evil.partner.io' resolved to 169.254.169.254, a link-local address; webhooks "
        "go to public addresses only, unless webhooks.allowed_hosts names that IP itself"
    )
    assert await writer.flush(5.0)


async def test_a_name_that_does_not_resolve_is_a_failed_attempt(
    writer: StoreWriter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def nxdomain(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    hooks = deliverer(writer, tmp_path, ["*.partner.io"])
    monkeypatch.setattr(hooks, "resolve", nxdomain)
    hook = delivery("https://gone.partner.io/hook")
    try:
        hooks.start([hook])
        await finished(hook)
    finally:
        await hooks.close()
    assert hook.status is DeliveryStatus.FAILED
    assert hook.last_error.startswith("host 'gone.partner.io' does not resolve")


async def test_the_connection_goes_to_the_checked_address_not_to_a_second_lookup(
    writer: StoreWriter, tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check's lookup says 127.0.0.1, under a loopback entry: allowed. Any lookup of the
    # name after it, the client's own to connect, fails: a rebinding DNS would answer it
    # with another address than the one checked.
    checks: list[str] = []

    async def checked(host: str, port: int) -> list[str]:
        checks.append(host)
        return ["127.0.0.1"]

    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo

    async def rebinding(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host in ("localhost", b"localhost"):  # anyio hands it over IDNA-encoded
            raise OSError("the name was looked up again to connect")
        return await real(host, *args, **kwargs)

    monkeypatch.setattr(loop, "getaddrinfo", rebinding)
    hooks = deliverer(writer, tmp_path, [f"localhost:{receiver.port}"])
    monkeypatch.setattr(hooks, "resolve", checked)
    hook = delivery(f"http://localhost:{receiver.port}/hook")
    try:
        hooks.start([hook])
        await finished(hook)
    finally:
        await hooks.close()
    assert hook.status is DeliveryStatus.DELIVERED, hook.last_error
    assert checks == ["localhost"]
    (arrived,) = receiver.received
    assert arrived.headers["host"] == f"localhost:{receiver.port}"  # the name, kept


class Recording(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self.connected: list[tuple[str, int]] = []

    async def connect_tcp(self, host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        self.connected.append((host, port))
        if host == "93.184.216.34":
            raise httpcore.ConnectError("unreachable")
        return object()


async def test_the_backend_connects_to_pinned_addresses_in_turn_and_nowhere_unpinned() -> None:
    inner = Recording()
    backend = PinnedBackend(inner)
    with pinned("hooks.example.com", 443, ["93.184.216.34", "2606:2800:220:1::1"]):
        await backend.connect_tcp("hooks.example.com", 443)
    assert inner.connected == [("93.184.216.34", 443), ("2606:2800:220:1::1", 443)]
    with pytest.raises(httpcore.ConnectError, match="no checked address"):
        await backend.connect_tcp("hooks.example.com", 443)
    with pinned("hooks.example.com", 443, PUBLIC), pytest.raises(httpcore.ConnectError):
        await backend.connect_tcp("hooks.example.com", 8443)  # another port: not pinned
