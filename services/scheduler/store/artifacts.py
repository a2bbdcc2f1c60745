"""Artifacts (results and checkpoints) on a filesystem path every service can reach."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mediamesh.common.output_formats import extension_for


@dataclass(frozen=True)
class StoredArtifact:
    path: str
    mime_type: str
    size_bytes: int
    sha256: str
    seed: int


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def write(self, job_id: str, data: bytes, mime_type: str, seed: int) -> StoredArtifact:
        """Write atomically, so a crash never leaves a truncated artifact under its name."""
        path = self.root / f"{job_id}.{extension_for(mime_type)}"
        partial = path.with_suffix(path.suffix + ".partial")
        partial.write_bytes(data)
        os.replace(partial, path)
        digest = hashlib.sha256(data).hexdigest()
        return StoredArtifact(str(path), mime_type, len(data), digest, seed)

    def read(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def chunks(self, path: str, offset: int, chunk_bytes: int) -> Iterator[tuple[int, bytes]]:
        with open(path, "rb") as source:
            source.seek(offset)
            while chunk := source.read(chunk_bytes):
                yield offset, chunk
                offset += len(chunk)

    def delete(self, path: str | None) -> None:
        if path:
            Path(path).unlink(missing_ok=True)
