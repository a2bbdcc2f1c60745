"""Request bodies within the gateway's message limit: JSON, or multipart form data.

Routes read their bodies here, after authenticating, rather than declaring a body parameter:
FastAPI reads and parses such a parameter before the route runs, whatever its size and
whoever sent it."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import TypeVar
from urllib.parse import parse_qsl

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect

from mediamesh.common.errors import InvalidArgument, MeshError, PayloadTooLarge, StatusCode
from mediamesh.gateway.api.form_nesting import bracketed_field, folded_fields
from mediamesh.gateway.core.strict_json import parse_json
from mediamesh.gateway.http.errors import UnsupportedMediaType

Model = TypeVar("Model", bound=BaseModel)
JSON = "application/json"
MULTIPART = "multipart/form-data"
URLENCODED = "application/x-www-form-urlencoded"
FORMS = (MULTIPART, URLENCODED)
# A form's fields: a job takes about 30, and a field sent twice is refused anyway. Without a
# bound a 63 MiB body of `a=&a=&...` made millions of pairs on the event loop.
MAX_FORM_FIELDS = 64
# File parts of a multipart form (an edit's image and mask, and their `image[]` spelling).
MAX_FORM_FILES = 8
# A url-encoded form carries no files, only text fields (prompts of at most 64 KiB): its body
# is held to this, whatever gateway.max_message_bytes allows a body with images.
MAX_URLENCODED_BYTES = 1024 * 1024


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The whole body; PayloadTooLarge (413) past `max_bytes`, checked before reading when the
    client declared its length; MeshError CANCELLED (499) when the client closes the
    connection before its body is whole."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"body: {declared} bytes; the limit is {max_bytes} bytes")
    parts: list[bytes] = []
    size = 0
    try:
        async for part in request.stream():
            size += len(part)
            if size > max_bytes:
                raise PayloadTooLarge(f"body: over the limit of {max_bytes} bytes")
            parts.append(part)
    except ClientDisconnect:
        # A client leaving is no fault of the server's: unhandled, Starlette's exception
        # would be logged as an error with its traceback and counted as a 500.
        raise MeshError(
            f"body: the client closed the connection after {size} bytes of it",
            code=StatusCode.CANCELLED,
        ) from None
    return b"".join(parts)


def media_type(request: Request, accepted: Sequence[str]) -> str:
    """The body's media type, one of `accepted`; UnsupportedMediaType (415) naming them for
    any other, rather than reading the body as something it may not be. A request that
    names no type is taken for JSON where JSON is accepted: curl -d and older clients of
    `/v1/jobs` send JSON without saying so."""
    declared = request.headers.get("content-type", "")
    kind = declared.partition(";")[0].strip().lower()
    if not kind and JSON in accepted:
        return JSON
    if kind in accepted:
        return kind
    said = f"{declared[:64]!r} is" if declared else "missing; it is"
    raise UnsupportedMediaType(f"Content-Type: {said} not read here; send {' or '.join(accepted)}")


async def read_json(request: Request, max_bytes: int) -> object:
    """The body parsed as JSON (`parse_json`'s checks, naming `body`); UnsupportedMediaType
    for a body that does not say it is JSON."""
    media_type(request, (JSON,))
    body = await read_body(request, max_bytes)
    return parse_json(body or b"{}", "body")


async def read_model(request: Request, model: type[Model], max_bytes: int) -> Model:
    """The JSON body as `model`; InvalidArgument naming the first field at fault."""
    body = await read_json(request, max_bytes)
    if not isinstance(body, dict):
        raise InvalidArgument(f"body: expected a JSON object of {model.__name__} fields")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise InvalidArgument(f"{where}: {first['msg']}") from None


async def read_form(
    request: Request, max_bytes: int, aliases: Mapping[str, str] | None = None
) -> tuple[dict[str, str], dict[str, bytes]]:
    """A form body as its text fields and its file parts (name -> bytes; multipart only);
    `aliases` maps another spelling of a field (`image[]`, as the openai client sends a list)
    to the field; other bracketed names are folded into the JSON text of their field
    (`form_nesting`). InvalidArgument naming a field sent more than once: each field of a job
    takes one value, and keeping one of several would drop the others without a word;
    UnsupportedMediaType for a body that is not a form."""
    media_type(request, FORMS)
    spelled = aliases or {}
    items, files, unchosen = await _form_items(request, max_bytes)
    # A nested value as the openai client flattens it (`adapters[][name]`) is one field.
    nested = [(n, text) for n, text in items if n not in spelled and bracketed_field(n)]
    fields = [(n, text) for n, text in items if n in spelled or not bracketed_field(n)]
    folded = folded_fields(nested)
    # A file input left empty is no input, but its name was sent: two of one name are as
    # much a repeat as two files are.
    sent = [name for name, _ in [*fields, *files]] + unchosen + list(folded)
    counts = Counter(spelled.get(name, name) for name in sent)
    for name, count in counts.items():
        if count > 1:
            raise InvalidArgument(f"{name}: sent {count} times; send it once")
    for name, data in files:
        if not data:
            # Every file part is an input image. An empty named one was sent all the same
            # (curl -F of an empty file): passed on, it would read as unsent, so a model that
            # takes no image would run without a word, and one that needs it would call it
            # missing.
            raise InvalidArgument(f"{name}: empty; send PNG, JPEG or WebP bytes")
    return (
        {**{spelled.get(name, name): text for name, text in fields}, **folded},
        {spelled.get(name, name): data for name, data in files},
    )


def _urlencoded_fields(body: bytes) -> list[tuple[str, str]]:
    """A url-encoded form's fields; InvalidArgument naming `body` for one of more than
    MAX_FORM_FIELDS fields (counted before any is parsed) or not UTF-8."""
    fields = body.count(b"&") + 1 if body else 0
    if fields > MAX_FORM_FIELDS:
        raise InvalidArgument(
            f"body: a form of {fields} fields; the limit is {MAX_FORM_FIELDS} fields"
        )
    if body.lstrip()[:1] in (b"{", b"["):
        # Its whole text would read as one field name, and the refusal would name that.
        raise InvalidArgument(
            f"body: JSON sent as {URLENCODED} (what curl -d says it sends); send it with "
            f"Content-Type: {JSON}"
        )
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise InvalidArgument("body: a form that is not UTF-8") from None
    # Percent-escapes may spell bytes that are not UTF-8 (`%ff`); parse_qsl would put U+FFFD
    # in their place, a prompt other than the one sent. Kept as surrogates, they are found.
    pairs = parse_qsl(
        text,
        keep_blank_values=True,
        strict_parsing=False,
        max_num_fields=MAX_FORM_FIELDS,
        errors="surrogateescape",
    )
    for name, value in pairs:
        _check_utf8(name, name)
        _check_utf8(name, value)
    return pairs


def _check_utf8(field: str, text: str) -> None:
    """InvalidArgument naming `field` when `text` holds bytes that were not UTF-8."""
    try:
        text.encode()
    except UnicodeEncodeError:
        shown = field.encode(errors="backslashreplace").decode()
        raise InvalidArgument(f"{shown}: not valid UTF-8") from None


class _StrictTextParser(MultiPartParser):
    """Starlette's multipart parser, except that a text part not in the form's charset is
    refused naming its field: Starlette reads it as Latin-1, a prompt other than the one
    sent."""

    def on_part_end(self) -> None:
        part = self._current_part
        if part.file is None:
            try:
                bytes(part.data).decode(self._charset)
            except (UnicodeDecodeError, LookupError):
                shown = part.field_name.encode(errors="backslashreplace").decode()
                raise InvalidArgument(f"{shown}: not valid {self._charset}") from None
        super().on_part_end()


async def _form_items(
    request: Request, max_bytes: int
) -> tuple[list[tuple[str, str]], list[tuple[str, bytes]], list[str]]:
    """The form's text fields and file parts in the order sent, each as often as sent, and
    the names of its file inputs left empty (left out of the file parts)."""
    if media_type(request, FORMS) == URLENCODED:
        body = await read_body(request, min(max_bytes, MAX_URLENCODED_BYTES))
        return _urlencoded_fields(body), [], []
    body = await read_body(request, max_bytes)

    async def once() -> AsyncGenerator[bytes, None]:
        yield body

    parser = _StrictTextParser(
        request.headers,
        once(),
        max_files=MAX_FORM_FILES,
        max_fields=MAX_FORM_FIELDS,
        max_part_size=max_bytes,
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidArgument(f"body: {exc.message}") from None
    fields: list[tuple[str, str]] = []
    files: list[tuple[str, bytes]] = []
    unchosen: list[str] = []
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            data = await value.read()
            if not data and not value.filename:
                # A browser's file input left empty: a part with no file name and no bytes,
                # which says no file was chosen, not that an empty one was.
                unchosen.append(name)
                continue
            files.append((name, data))
        else:
            fields.append((name, value))
    return fields, files, unchosen
