"""Request bodies within the gateway's message limit: JSON, or multipart form data."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from urllib.parse import parse_qsl

from fastapi import Request
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from mediamesh.common.errors import InvalidArgument, PayloadTooLarge


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The whole body; PayloadTooLarge (413) past `max_bytes`, checked before reading when the
    client declared its length."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"body: {declared} bytes; the limit is {max_bytes} bytes")
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > max_bytes:
            raise PayloadTooLarge(f"body: over the limit of {max_bytes} bytes")
        parts.append(part)
    return b"".join(parts)


def is_form(request: Request) -> bool:
    """Whether the body is a form: multipart/form-data or application/x-www-form-urlencoded."""
    kind = request.headers.get("content-type", "").lower()
    return kind.startswith(("multipart/form-data", "application/x-www-form-urlencoded"))


async def read_json(request: Request, max_bytes: int) -> object:
    """The body parsed as JSON; InvalidArgument when it is not."""
    body = await read_body(request, max_bytes)
    try:
        return json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"body: not valid JSON ({exc})") from None


async def read_form(request: Request, max_bytes: int) -> tuple[dict[str, str], dict[str, bytes]]:
    """A form body as its text fields and its file parts (name -> bytes; multipart only)."""
    body = await read_body(request, max_bytes)
    if not request.headers.get("content-type", "").lower().startswith("multipart/"):
        try:
            pairs = parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False)
        except UnicodeDecodeError:
            raise InvalidArgument("body: a form that is not UTF-8") from None
        return dict(pairs), {}

    async def once() -> AsyncGenerator[bytes, None]:
        yield body

    parser = MultiPartParser(request.headers, once(), max_part_size=max_bytes)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidArgument(f"body: {exc.message}") from None
    fields: dict[str, str] = {}
    files: dict[str, bytes] = {}
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            files[name] = await value.read()
        else:
            fields[name] = value
    return fields, files
