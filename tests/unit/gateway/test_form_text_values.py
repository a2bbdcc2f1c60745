"""Multipart form values as browsers and curl send them: a line break (CRLF in an HTML form)
is a newline, and a bytes field given as text is told to come as a file part."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.gateway.api.json_plane import request_from_form

FOX = {"model": "flux-tiny"}


def test_a_line_break_in_a_form_text_is_a_newline() -> None:
    lines = [f"line {n}" for n in range(20)]
    request = request_from_form(
        {**FOX, "prompt": "\r\n".join(lines), "negative_prompt": "blur\r\nnoise"}, {}
    )
    assert request.prompt == "\n".join(lines)
    assert request.negative_prompt == "blur\nnoise"


@pytest.mark.parametrize("name", ["image", "mask_image"])
def test_a_bytes_field_sent_as_text_is_told_to_come_as_a_file(name: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        request_from_form({**FOX, "prompt": "a fox", name: "iVBORw0KGgoAAAANSUhEUg"}, {})
    message = caught.value.message
    assert message.startswith(f"{name}: a form sends this field as a file part"), message
    assert "number" not in message
