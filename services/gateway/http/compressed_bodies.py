"""Request bodies sent compressed (`Content-Encoding`), as Triton's HTTP face reads them:
gzip and deflate (zlib's format, which is what HTTP's "deflate" means and what
`tritonclient.http` sends), inflated within the same limit as a body sent uncompressed.

A few KiB of gzip can inflate to gigabytes, so the output is produced a bounded piece at a
time and the body refused as soon as it passes the limit, never inflated whole first.
"""

from __future__ import annotations

import zlib

from mediamesh.common.errors import InvalidArgument, PayloadTooLarge
from mediamesh.gateway.http.errors import UnsupportedMediaType

IDENTITY = "identity"
# zlib's window bits for each encoding's container: gzip's header and trailer, or zlib's.
_WINDOW_BITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
ENCODINGS = tuple(_WINDOW_BITS)
# How much output one step of inflation may make: bounds what a bomb costs before it is
# refused, without a step per byte of an ordinary body.
_PIECE_BYTES = 1024 * 1024


def content_encoding(header: str | None) -> str:
    """The body's encoding, `identity` (none), gzip or deflate; UnsupportedMediaType (415)
    naming those for any other, as RFC 9110 asks of a coding the server does not read."""
    encoding = (header or IDENTITY).strip().lower()
    if encoding != IDENTITY and encoding not in _WINDOW_BITS:
        raise UnsupportedMediaType(
            f"Content-Encoding: {encoding[:64]!r} is not supported; send the body "
            f"uncompressed or with {' or '.join(ENCODINGS)}"
        )
    return encoding


def inflated(body: bytes, encoding: str, max_bytes: int) -> bytes:
    """`body` decoded from `encoding` (as `content_encoding` gave it); PayloadTooLarge (413)
    naming `max_bytes` once the decoded body passes it, InvalidArgument naming the body when
    it is not whole, valid data of that encoding."""
    if encoding == IDENTITY:
        return body
    inflater = zlib.decompressobj(_WINDOW_BITS[encoding])
    pieces: list[bytes] = []
    size = 0
    pending = body
    try:
        while True:
            # One byte over the room left is enough to know the limit is passed.
            room = min(max_bytes - size + 1, _PIECE_BYTES)
            piece = inflater.decompress(pending, room)
            size += len(piece)
            if size > max_bytes:
                raise PayloadTooLarge(
                    f"body: over the limit of {max_bytes} bytes once decompressed "
                    f"(Content-Encoding: {encoding})"
                )
            pieces.append(piece)
            pending = inflater.unconsumed_tail
            if inflater.eof or not (pending or piece):
                break
    except zlib.error as exc:
        raise InvalidArgument(f"body: not valid {encoding} data ({exc})") from None
    if not inflater.eof:
        raise InvalidArgument(f"body: the {encoding} data ends before its stream does")
    if inflater.unused_data:
        raise InvalidArgument(
            f"body: {len(inflater.unused_data)} bytes after the end of the {encoding} stream"
        )
    return b"".join(pieces)
