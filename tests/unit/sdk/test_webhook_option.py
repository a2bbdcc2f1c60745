"""The `webhook` option is checked as its message is: a key Webhook has no field for is a
ValueError naming it and the fields there are, before anything is sent, never dropped."""

from __future__ import annotations

import pytest

from mediamesh.sdk import Client
from mediamesh.sdk.api.convert import generate_request, webhook_message
from mediamesh.sdk.options import generate_params

# Nothing listens here: every refusal below comes before a connection is tried.
NOWHERE = "127.0.0.1:9"
URL = "http://127.0.0.1:19500/ok"


def test_a_webhook_becomes_its_message() -> None:
    message = webhook_message({"url": URL, "events": ["progress", "completed"]})
    assert (message.url, list(message.events)) == (URL, ["progress", "completed"])
    assert list(webhook_message({"url": URL, "events": None}).events) == []
    request = generate_request(generate_params("echo", "x", {"webhook": {"url": URL}}))
    assert request.webhook.url == URL and not request.webhook.events


def test_an_unknown_webhook_key_is_refused_naming_it_and_the_fields() -> None:
    with pytest.raises(ValueError) as refused:
        webhook_message({"url": URL, "event": ["progress"]})
    assert str(refused.value) == (
        "webhook.event: Webhook has no such field; its fields: url and events"
    )


@pytest.mark.parametrize(
    ("webhook", "kind", "message"),
    [
        ({"url": URL, "event": ["progress"]}, ValueError, "webhook.event: Webhook has no such"),
        ({"events": ["completed"]}, ValueError, "webhook.url: missing"),
        ({"url": 7}, TypeError, "webhook.url: must be a string, got 7"),
        ({"url": URL, "events": "completed"}, TypeError, "webhook.events: give a list"),
        ({"url": URL, "events": ["completed", 3]}, TypeError, "webhook.events[1]: must be a str"),
        ({1: URL}, TypeError, "webhook: field names are strings (url and events), got 1"),
        (URL, TypeError, 'webhook: give {"url": "https://...", "events"'),
    ],
)
def test_a_webhook_its_message_cannot_carry_fails_the_call_before_sending(
    webhook: object, kind: type[Exception], message: str
) -> None:
    with pytest.raises(kind) as refused:
        generate_params("echo", "x", {"webhook": webhook})
    assert str(refused.value).startswith(message)
    with Client(NOWHERE, timeout_s=0.5) as client:
        # Raised by the call itself, not by the first event of the stream it would open.
        with pytest.raises(kind):
            client.generate("flux-tiny", "x", webhook=webhook)  # type: ignore[arg-type]
        with pytest.raises(kind):
            client.submit("flux-tiny", "x", webhook=webhook)  # type: ignore[arg-type]
