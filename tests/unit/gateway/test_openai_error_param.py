"""OpenAI's `param` is the field path a mesh error message starts with, an item of a list
included, read as the SDK's GatewayError.field reads it."""

from __future__ import annotations

import json

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.gateway.http.errors import error_response
from mediamesh.sdk.errors import field_of

MESSAGES = [
    ("steps: must be at most 50", "steps"),
    ("adapters[0].scale: 9.0 is out of range; allowed 0.0..2.0", "adapters[0].scale"),
    ("adapters[1].name: no adapter 'x' for model 'flux-tiny'", "adapters[1].name"),
    ("webhook.events[0]: 'done' is not an event", "webhook.events[0]"),
    ("adapters]0[: backwards", None),
    ("failed to connect to all addresses; last error: UNKNOWN", None),
]


@pytest.mark.parametrize(("message", "param"), MESSAGES)
def test_param_is_the_field_path_the_message_starts_with(message: str, param: str | None) -> None:
    answer = error_response(InvalidArgument(message), "/v1/images/generations")
    assert json.loads(bytes(answer.body))["error"]["param"] == param
    assert field_of(message) == param
