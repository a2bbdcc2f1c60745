"""Ogg pages rewritten with one fixed stream serial number, so that a seed gives one file.

libsndfile draws each Ogg Vorbis file's logical stream serial number at random, and the
serial is in every page's header and so in its checksum: two encodings of the same samples
differed in those bytes alone. Any serial is valid for a file of one stream (RFC 3533), so
each page gets the same one and its CRC is computed again.
"""

from __future__ import annotations

import struct
import zlib

# "mmsh": any constant would do; one that reads as the mesh's in a hex dump.
FIXED_SERIAL = 0x6D6D7368
_HEADER = 27  # bytes of a page header before its segment table
_SERIAL_AT, _CRC_AT = 14, 22
# Ogg's CRC-32 is the unreflected form of the polynomial zlib uses: computed over each
# byte's bits reversed, zlib's reflected CRC is the Ogg CRC reversed (with zlib's initial
# and final inversions undone). That keeps the loop over the bytes in C.
_REVERSED_BITS = bytes(int(f"{value:08b}"[::-1], 2) for value in range(256))


class OggPageError(ValueError):
    """Bytes that are not a sequence of whole Ogg pages."""


def with_fixed_serial(data: bytes) -> bytes:
    """`data`, an Ogg file of one logical stream, with every page's serial number
    FIXED_SERIAL and its checksum made right again."""
    out = bytearray(data)
    at = 0
    while at < len(out):
        if out[at : at + 4] != b"OggS" or at + _HEADER > len(out):
            raise OggPageError(f"no Ogg page at byte {at}")
        segments = out[at + 26]
        size = _HEADER + segments + sum(out[at + _HEADER : at + _HEADER + segments])
        if at + size > len(out):
            raise OggPageError(f"the page at byte {at} runs past the end")
        struct.pack_into("<I", out, at + _SERIAL_AT, FIXED_SERIAL)
        out[at + _CRC_AT : at + _CRC_AT + 4] = bytes(4)
        struct.pack_into("<I", out, at + _CRC_AT, page_crc(bytes(out[at : at + size])))
        at += size
    return bytes(out)


def page_crc(page: bytes) -> int:
    """The Ogg CRC-32 of `page`, whose own checksum field is zero."""
    reflected = zlib.crc32(page.translate(_REVERSED_BITS), 0xFFFFFFFF) ^ 0xFFFFFFFF
    return int(f"{reflected:032b}"[::-1], 2)
