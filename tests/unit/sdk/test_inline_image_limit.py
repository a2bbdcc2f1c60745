"""An image too large to send inline is refused before sending, naming the option, the limit
and the upload to use instead; and gRPC's own "SERVER: ..." or "CLIENT: ..." messages about
an oversized message name no request field."""

from __future__ import annotations

import pytest

from mediamesh.common.limits import INPUT_IMAGE
from mediamesh.sdk import GatewayError
from mediamesh.sdk.options import generate_params

LIMIT = INPUT_IMAGE.max_bytes


@pytest.mark.parametrize("option", ["image", "mask_image"])
def test_an_image_above_the_inline_limit_is_refused_before_sending(option: str) -> None:
    with pytest.raises(ValueError) as refused:
        generate_params("sdxl-img2img-tiny", "x", {option: b"\0" * (LIMIT + 1)})
    message = str(refused.value)
    assert message.startswith(f"{option}: {LIMIT + 1} bytes; the limit for an image sent inline")
    assert f"is {LIMIT} bytes (8 MiB)" in message
    assert f"client.upload(...) and pass {option}_id=handle.input_id" in message


def test_an_image_at_the_limit_is_sent() -> None:
    params = generate_params("sdxl-img2img-tiny", "x", {"image": b"\0" * LIMIT})
    assert len(params.options["image"]) == LIMIT  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "message",
    [
        "SERVER: Received message larger than max (20971797 vs. 16777216)",
        "CLIENT: Sent message larger than max (73400598 vs. 67108864)",
        "Deadline Exceeded",
        "Exception iterating responses: boom",
    ],
)
def test_grpc_own_messages_name_no_field(message: str) -> None:
    assert GatewayError("RESOURCE_EXHAUSTED", message).field is None


def test_field_paths_still_name_their_field() -> None:
    assert GatewayError("INVALID_ARGUMENT", "image_id: no upload 'u'").field == "image_id"
    assert GatewayError("INVALID_ARGUMENT", "inputs[0].data: x").field == "inputs[0].data"
