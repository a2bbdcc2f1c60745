"""Bodies the HTTP face reads are bounded before they are parsed: a url-encoded form by its
field count and a small body limit, a JSON body by its depth; each refusal names `body`
and the limit."""

from __future__ import annotations

import time

import pytest
from starlette.requests import Request

from mediamesh.common.errors import InvalidArgument, PayloadTooLarge
from mediamesh.gateway.core.strict_json import MAX_JSON_DEPTH
from mediamesh.gateway.http.bodies import (
    MAX_FORM_FIELDS,
    MAX_URLENCODED_BYTES,
    read_form,
    read_json,
)

MIB = 1024 * 1024
FORM = "application/x-www-form-urlencoded"


def request_of(body: bytes, content_type: str, declared: bool = True) -> Request:
    """A request carrying `body` in 64 KiB pieces; `declared`: with its Content-Length."""
    headers = [(b"content-type", content_type.encode())]
    if declared:
        headers.append((b"content-length", str(len(body)).encode()))
    pieces = [body[i : i + 65536] for i in range(0, len(body), 65536)] or [b""]

    async def receive() -> dict:
        if pieces:
            piece = pieces.pop(0)
            return {"type": "http.request", "body": piece, "more_body": bool(pieces)}
        return {"type": "http.disconnect"}

    scope = {"type": "http", "method": "POST", "path": "/", "query_string": b"", "headers": headers}
    return Request(scope, receive)


async def test_a_url_encoded_form_of_too_many_fields_is_refused_before_it_is_parsed():
    with pytest.raises(InvalidArgument) as caught:
        await read_form(request_of(b"a=&" * 1000, FORM), 64 * MIB)
    assert caught.value.message == (
        f"body: a form of 1001 fields; the limit is {MAX_FORM_FIELDS} fields"
    )
    # A job's form, and fields up to the limit, pass.
    fields, files = await read_form(request_of(b"prompt=a+fox&steps=4", FORM), 64 * MIB)
    assert fields == {"prompt": "a fox", "steps": "4"} and files == {}
    body = "&".join(f"f{i}=x" for i in range(MAX_FORM_FIELDS)).encode()
    fields, _ = await read_form(request_of(body, FORM), 64 * MIB)
    assert len(fields) == MAX_FORM_FIELDS


async def test_a_url_encoded_form_is_held_to_its_own_small_body_limit():
    # Within the gateway's body limit (64 MiB), over the form's: refused on its declared
    # length before a byte is read, and by count when it declares none.
    huge = b"a=&" * (21 * MIB)
    started = time.perf_counter()
    with pytest.raises(PayloadTooLarge) as caught:
        await read_form(request_of(huge, FORM), 64 * MIB)
    assert time.perf_counter() - started < 0.5
    assert (
        caught.value.message
        == f"body: {len(huge)} bytes; the limit is {MAX_URLENCODED_BYTES} bytes"
    )
    body = b"prompt=" + b"x" * (2 * MIB)
    with pytest.raises(PayloadTooLarge, match=f"over the limit of {MAX_URLENCODED_BYTES} bytes"):
        await read_form(request_of(body, FORM, declared=False), 64 * MIB)


async def test_a_multipart_form_of_too_many_fields_is_refused():
    boundary = "b0undary"
    part = f'--{boundary}\r\nContent-Disposition: form-data; name="f"\r\n\r\nx\r\n'
    body = (part * (MAX_FORM_FIELDS + 1) + f"--{boundary}--\r\n").encode()
    with pytest.raises(InvalidArgument, match=f"^body: .*{MAX_FORM_FIELDS}"):
        await read_form(request_of(body, f"multipart/form-data; boundary={boundary}"), 64 * MIB)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 5_000, 100_000])
async def test_json_nested_too_deep_is_refused_naming_body(depth: int):
    body = b"[" * depth + b"]" * depth
    with pytest.raises(InvalidArgument) as caught:
        await read_json(request_of(body, "application/json"), 64 * MIB)
    assert caught.value.message == f"body: JSON nested more than {MAX_JSON_DEPTH} levels deep"


async def test_json_nested_within_the_limit_is_read():
    body = b'{"a":' * (MAX_JSON_DEPTH - 1) + b"[]" + b"}" * (MAX_JSON_DEPTH - 1)
    parsed = await read_json(request_of(body, "application/json"), 64 * MIB)
    assert isinstance(parsed, dict)
    # Many brackets side by side nest no deeper.
    wide = b"[" + b",".join([b"[]"] * 10_000) + b"]"
    assert len(await read_json(request_of(wide, "application/json"), 64 * MIB)) == 10_000


def multipart(fields: list[tuple[str, bytes]], charset: str = "") -> Request:
    boundary = "b0undary"
    body = (
        b"".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            + value
            + b"\r\n"
            for name, value in fields
        )
        + f"--{boundary}--\r\n".encode()
    )
    suffix = f"; charset={charset}" if charset else ""
    return request_of(body, f"multipart/form-data; boundary={boundary}{suffix}")


async def test_form_text_that_is_not_utf8_is_refused_naming_its_field():
    # Decoded with replacement characters (url-encoded) or as Latin-1 (multipart), these
    # bytes would become a prompt other than the one sent.
    with pytest.raises(InvalidArgument) as caught:
        await read_form(request_of(b"model=flux-tiny&prompt=%ff%fe", FORM), 64 * MIB)
    assert caught.value.message == "prompt: not valid UTF-8"
    with pytest.raises(InvalidArgument) as caught:
        await read_form(multipart([("model", b"echo"), ("prompt", b"\xff\xfe")]), 64 * MIB)
    assert caught.value.message == "prompt: not valid utf-8"
    # UTF-8 text, escaped or not, passes as sent; a form that declares Latin-1 is read so.
    fields, _ = await read_form(request_of(b"prompt=caf%C3%A9+%E2%9C%93", FORM), 64 * MIB)
    assert fields == {"prompt": "café ✓"}
    fields, _ = await read_form(multipart([("prompt", "café ✓".encode())]), 64 * MIB)
    assert fields == {"prompt": "café ✓"}
    fields, _ = await read_form(multipart([("prompt", b"caf\xe9")], "latin-1"), 64 * MIB)
    assert fields == {"prompt": "café"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"steps": ' + b"9" * 5000 + b"}", "body: a number of more than 4300 digits"),
        (b'{"steps": 1, "steps": 2}', "steps: given twice in one JSON object; give it once"),
        (b'{"steps": ', "body: not valid JSON (Expecting value: line 1 column 11 (char 10))"),
    ],
)
async def test_json_the_parser_alone_would_fail_on_is_refused_by_name(body: bytes, message: str):
    with pytest.raises(InvalidArgument) as caught:
        await read_json(request_of(body, "application/json"), 64 * MIB)
    assert caught.value.message == message


async def test_json_sent_as_a_url_encoded_form_is_refused_saying_so():
    # curl -d '{...}' labels its body a url-encoded form.
    with pytest.raises(InvalidArgument) as caught:
        await read_form(request_of(b' {"model": "echo", "prompt": "x"}', FORM), 64 * MIB)
    assert caught.value.message == (
        "body: JSON sent as application/x-www-form-urlencoded (what curl -d says it sends); "
        "send it with Content-Type: application/json"
    )
