"""What an upload sends: the input's bytes, their SHA-256 and MIME type, in chunks."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

# Under the gateway's per-chunk limit (4 MiB), well under any message limit.
CHUNK_BYTES = 1024 * 1024
# Leading bytes of each input format an upload may hold.
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
)


@dataclass(frozen=True)
class UploadSource:
    """An input ready to upload."""

    data: bytes = field(repr=False)
    sha256: str
    mime_type: str

    def chunks(self, size: int = CHUNK_BYTES) -> list[bytes]:
        """The data in pieces of at most `size` bytes (one empty piece for empty data)."""
        return [self.data[i : i + size] for i in range(0, len(self.data), size)] or [b""]


def upload_source(source: bytes | str | Path, mime_type: str | None = None) -> UploadSource:
    """The bytes of `source` (bytes, or a file's path) with their SHA-256 and MIME type
    (guessed from the leading bytes when not given)."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    return UploadSource(data, hashlib.sha256(data).hexdigest(), mime_type or guess_mime(data))


def guess_mime(data: bytes) -> str:
    """The MIME type of a PNG, JPEG or WebP by its leading bytes; "" when none matches."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((mime for magic, mime in _SIGNATURES if data.startswith(magic)), "")
