"""Artifacts (job results): the store's interface, and its backend on a local filesystem.

Every backend is async and keeps the event loop free: local disk goes through a thread,
object storage (s3_artifacts.py) through obstore's own async client. A `StoredArtifact`'s
`path` is the backend's name for the object: a file path here, a key in the bucket there.
Checkpoints are not artifacts: workers write them to a shared folder (`checkpoints.py`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import AsyncIterator, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mediamesh.common.output_formats import extension_for

# What a result is named (`<job id>.<extension>`, a partial write with `.partial` after it):
# the sweep leaves anything else where results are kept alone.
RESULT_NAME = re.compile(r"[0-9a-f]{32}\.[a-z0-9]+(\.partial)?")


@dataclass(frozen=True)
class StoredArtifact:
    """A job's result as the store holds it, with what a reader needs to check it."""

    path: str
    mime_type: str
    size_bytes: int
    sha256: str
    seed: int


@dataclass(frozen=True)
class SignedUrl:
    """A URL that fetches an artifact without credentials until `expires_unix_ms`."""

    url: str
    expires_unix_ms: int


class ArtifactStore(Protocol):
    """Where results are written, read, streamed, signed and deleted."""

    @property
    def signs_urls(self) -> bool:
        """Whether `signed_url` can return a URL at all."""
        ...

    async def write(self, job_id: str, data: bytes, mime_type: str, seed: int) -> StoredArtifact:
        """Store the job's result; a crash never leaves a truncated object under its name."""
        ...

    async def read(self, path: str) -> bytes:
        """The whole artifact."""
        ...

    def chunks(self, path: str, offset: int, chunk_bytes: int) -> AsyncIterator[tuple[int, bytes]]:
        """The artifact from byte `offset` on, as (offset, data) pieces of `chunk_bytes` at
        most; nothing when `offset` is at its end."""
        ...

    async def exists(self, path: str) -> bool:
        """Whether the artifact is still there (not deleted after its retention)."""
        ...

    async def signed_url(self, path: str) -> SignedUrl | None:
        """A presigned GET URL for the artifact, or None when the backend cannot sign."""
        ...

    async def delete(self, path: str | None) -> None:
        """Delete the artifact; a missing one (or None) is fine."""
        ...

    async def sweep(self, older_than: float) -> int:
        """Delete the results last written before `older_than` (Unix seconds); how many.
        Called with a time past which no job can still name one (see the runtime's
        housekeeping), it removes what a crash between a job's deletion and its result's
        left behind."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class LocalArtifactStore:
    """Results as files under `root`, a folder every reader of results can reach.

    It cannot sign URLs: a result asked for as a URL is served by Download (and by the
    gateway's HTTP result endpoint) instead.
    """

    signs_urls = False

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _write(self, job_id: str, data: bytes, mime_type: str, seed: int) -> StoredArtifact:
        path = self.root / f"{job_id}.{extension_for(mime_type)}"
        partial = path.with_suffix(path.suffix + ".partial")
        partial.write_bytes(data)
        os.replace(partial, path)
        digest = hashlib.sha256(data).hexdigest()
        return StoredArtifact(str(path), mime_type, len(data), digest, seed)

    async def write(self, job_id: str, data: bytes, mime_type: str, seed: int) -> StoredArtifact:
        """Write atomically (a partial file renamed into place)."""
        return await asyncio.to_thread(self._write, job_id, data, mime_type, seed)

    async def read(self, path: str) -> bytes:
        """The whole file."""
        return await asyncio.to_thread(Path(path).read_bytes)

    async def chunks(
        self, path: str, offset: int, chunk_bytes: int
    ) -> AsyncIterator[tuple[int, bytes]]:
        """The file from `offset`, read in a thread one chunk at a time."""
        pieces = _file_chunks(path, offset, chunk_bytes)
        try:
            while (item := await asyncio.to_thread(next, pieces, None)) is not None:
                yield item
        finally:
            pieces.close()

    async def exists(self, path: str) -> bool:
        """Whether the file is there."""
        return await asyncio.to_thread(Path(path).exists)

    async def signed_url(self, path: str) -> SignedUrl | None:
        """Local files have no URL of their own."""
        return None

    async def delete(self, path: str | None) -> None:
        """Delete the file, if any."""
        if path:
            await asyncio.to_thread(Path(path).unlink, missing_ok=True)

    async def sweep(self, older_than: float) -> int:
        """Delete result files modified before `older_than`; the folders beside them
        (checkpoints, inputs) are not results and are left alone."""
        return await asyncio.to_thread(self._sweep, older_than)

    def _sweep(self, older_than: float) -> int:
        swept = 0
        with os.scandir(self.root) as entries:
            for entry in entries:
                if not (entry.is_file(follow_symlinks=False) and RESULT_NAME.fullmatch(entry.name)):
                    continue
                try:
                    if entry.stat(follow_symlinks=False).st_mtime < older_than:
                        os.unlink(entry.path)
                        swept += 1
                except FileNotFoundError:
                    continue  # deleted meanwhile, by its job's own deletion
        return swept

    async def close(self) -> None:
        """Nothing to release."""


def _file_chunks(
    path: str, offset: int, chunk_bytes: int
) -> Generator[tuple[int, bytes], None, None]:
    with open(path, "rb") as source:
        source.seek(offset)
        while chunk := source.read(chunk_bytes):
            yield offset, chunk
            offset += len(chunk)
