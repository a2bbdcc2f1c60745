"""Webhook URLs the mesh may call, the requests' checks, and the delivery signature."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from mediamesh.common.errors import FailedPrecondition, InvalidArgument
from mediamesh.common.webhook_settings import WebhookSettings
from mediamesh.common.webhook_signing import signature_header, verify
from mediamesh.scheduler.core.delivery import ResultDelivery, WebhookTarget
from mediamesh.scheduler.webhook_policy import url_problem, webhook_target

ALLOWED = ["hooks.example.com", "*.partner.io", "127.0.0.1:8123", "[::1]:9000"]


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/mediamesh",
        "https://HOOKS.example.com:443/x",
        "https://a.partner.io/hook",
        "https://deep.a.partner.io/hook",
        "http://127.0.0.1:8123/hook",
        "http://[::1]:9000/hook",
    ],
)
def test_allowed_urls(url: str):
    assert url_problem(url, ALLOWED) == ""


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://evil.example.com/x", "not in webhooks.allowed_hosts"),
        ("https://hooks.example.com.evil.net/x", "not in webhooks.allowed_hosts"),
        ("https://partner.io/x", "not in webhooks.allowed_hosts"),  # the wildcard needs a label
        ("https://xpartner.io/x", "not in webhooks.allowed_hosts"),
        ("http://127.0.0.1:8124/hook", "not in webhooks.allowed_hosts"),  # another port
        ("http://169.254.169.254/latest/meta-data", "must use https"),
        ("http://hooks.example.com/x", "must use https"),
        ("ftp://hooks.example.com/x", "absolute http(s) URL"),
        ("/relative", "absolute http(s) URL"),
        ("https://user:pw@hooks.example.com/x", "credentials"),
        ("https://hooks.example.com:99999/x", "not a valid URL"),
    ],
)
def test_refused_urls_say_why(url: str, reason: str):
    assert reason in url_problem(url, ALLOWED)


def test_nothing_is_allowed_by_default():
    assert "not in webhooks.allowed_hosts" in url_problem("https://hooks.example.com/x", [])


def settings() -> WebhookSettings:
    return WebhookSettings(
        allowed_hosts=["hooks.example.com"], secrets={"acme": SecretStr("s3cret")}
    )


def test_a_request_webhook_is_checked_and_normalised():
    target = webhook_target(
        "https://hooks.example.com/h", ["progress", "completed", "progress"], "acme", settings()
    )
    assert target == WebhookTarget("https://hooks.example.com/h", ("completed", "progress"))
    default = webhook_target("https://hooks.example.com/h", [], "acme", settings())
    assert default.events == ("completed", "failed")


def test_request_errors_name_the_field():
    with pytest.raises(InvalidArgument, match=r"^webhook\.url: host 'internal\.svc'"):
        webhook_target("https://internal.svc/h", [], "acme", settings())
    with pytest.raises(InvalidArgument, match=r"^webhook\.url: required"):
        webhook_target("", [], "acme", settings())
    with pytest.raises(InvalidArgument, match=r"^webhook\.events: 'started'"):
        webhook_target("https://hooks.example.com/h", ["started"], "acme", settings())
    with pytest.raises(FailedPrecondition, match=r"webhooks\.secrets\.other"):
        webhook_target("https://hooks.example.com/h", [], "other", settings())


def test_delivery_options_survive_the_store_record():
    delivery = ResultDelivery(True, WebhookTarget("https://hooks.example.com/h", ("failed",)))
    assert ResultDelivery.from_record(delivery.to_record()) == delivery
    assert ResultDelivery.from_record({}) == ResultDelivery()


def test_signature_verifies_only_the_signed_body_secret_and_recent_time():
    body = b'{"event":"completed"}'
    header = signature_header("s3cret", 1_700_000_000, body)
    assert header.startswith("t=1700000000,v1=")
    assert verify("s3cret", header, body, now=1_700_000_100)
    assert not verify("s3cret", header, body + b" ", now=1_700_000_100)
    assert not verify("other", header, body, now=1_700_000_100)
    assert not verify("s3cret", header, body, now=1_700_001_000)  # too old: a replay
    assert not verify("s3cret", "v1=abc", body, now=1_700_000_000)
