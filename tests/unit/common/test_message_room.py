"""A download chunk and an inline result must each fit in one message of the gateway's limit."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mediamesh.common.settings import MESSAGE_ENVELOPE_BYTES, GatewaySettings

MIB = 1024 * 1024


def test_defaults_shrink_to_fit_a_smaller_message_limit() -> None:
    gateway = GatewaySettings(max_message_bytes=MIB)
    room = MIB - MESSAGE_ENVELOPE_BYTES
    assert gateway.download_chunk_bytes == room
    assert gateway.inline_result_limit_bytes == room
    assert GatewaySettings().download_chunk_bytes == MIB  # roomy defaults stay as they are


@pytest.mark.parametrize("field", ["download_chunk_bytes", "inline_result_limit_bytes"])
def test_a_value_set_too_large_for_the_message_limit_is_refused(field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        GatewaySettings(max_message_bytes=MIB, **{field: MIB})
    message = str(caught.value)
    assert f"gateway.{field}: {MIB} bytes does not fit" in message
    assert f"at most {MIB - MESSAGE_ENVELOPE_BYTES}" in message


def test_values_that_fit_are_kept() -> None:
    gateway = GatewaySettings(max_message_bytes=2 * MIB, download_chunk_bytes=MIB)
    assert gateway.download_chunk_bytes == MIB
