"""File inputs left empty (a part with no file name and no bytes) are no inputs, but their
name was sent: two of one name are refused as two files of one name are."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.gateway.http.bodies import read_form
from tests.unit.gateway.test_http_body_limits import MIB, request_of

BOUNDARY = "b0undary"
PNG = b"\x89PNG\r\n\x1a\n"


def form(parts: list[tuple[str, str, bytes]]) -> bytes:
    """multipart/form-data of (name, filename, bytes) file parts and a model field."""
    body = f'--{BOUNDARY}\r\ncontent-disposition: form-data; name="model"\r\n\r\necho\r\n'.encode()
    for name, filename, data in parts:
        head = f'--{BOUNDARY}\r\ncontent-disposition: form-data; name="{name}"; '
        head += f'filename="{filename}"\r\ncontent-type: application/octet-stream\r\n\r\n'
        body += head.encode() + data + b"\r\n"
    return body + f"--{BOUNDARY}--\r\n".encode()


async def read(parts: list[tuple[str, str, bytes]]) -> tuple[dict, dict]:
    content_type = f"multipart/form-data; boundary={BOUNDARY}"
    return await read_form(request_of(form(parts), content_type), 64 * MIB)


async def test_two_empty_file_inputs_of_one_name_are_refused_as_sent_twice() -> None:
    with pytest.raises(InvalidArgument, match=r"image: sent 2 times; send it once"):
        await read([("image", "", b""), ("image", "", b"")])


async def test_an_empty_file_input_beside_a_chosen_file_of_its_name_is_a_repeat_too() -> None:
    with pytest.raises(InvalidArgument, match=r"image: sent 2 times"):
        await read([("image", "a.png", PNG), ("image", "", b"")])


async def test_one_empty_file_input_is_still_no_input() -> None:
    fields, files = await read([("image", "", b"")])
    assert fields == {"model": "echo"} and files == {}
