"""KServe's `output_format` parameter is taken as sent, as native Submit and the OpenAI face
take it: formats are lowercase, so `PNG` or ` webp ` is refused naming the parameter and
the formats the model allows, never quietly normalised into one."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.registry import load_registry
from mediamesh.gateway.core.inference_call import InputTensor, parse_call

FLUX = load_registry().get("flux-tiny")
PROMPT = InputTensor("prompt", "BYTES", (1,), elements=(b"a fox",))


@pytest.mark.parametrize("sent", ["PNG", " webp ", "Jpeg", "png "])
def test_output_format_not_lowercase_or_trimmed_is_refused_naming_the_parameter(sent: str):
    assert FLUX is not None
    with pytest.raises(InvalidArgument) as caught:
        parse_call(FLUX, [PROMPT], {"output_format": sent}, [])
    assert caught.value.message.startswith(f"output_format: {sent!r} is not available")
    assert "allowed: png, jpeg, webp" in caught.value.message


def test_output_format_as_listed_is_taken():
    assert FLUX is not None
    call = parse_call(FLUX, [PROMPT], {"output_format": "webp"}, [])
    assert call.elements[0].output_format == "webp"
