"""The bytes of recent small results kept in memory, in front of any artifact backend.

A job's watchers are sent its result right after the result is written: read back from
disk, that is a thread hand-off per job (and a GET per job on object storage), which under
load cost the scheduler more than the write itself. The bytes are in hand when they are
written, so results small enough to go inline are kept here, least recently written
evicted first, up to `capacity_bytes`. Everything else, including every write, goes to the
backend unchanged: the cache is never the only copy.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator

from mediamesh.scheduler.store.artifacts import ArtifactStore, SignedUrl, StoredArtifact

# Memory the cache may hold: a few seconds of small results at a high request rate.
DEFAULT_CAPACITY_BYTES = 32 * 1024 * 1024


class RecentArtifacts:
    """An ArtifactStore that answers `read` of a recently written small result from memory."""

    def __init__(
        self,
        backend: ArtifactStore,
        max_item_bytes: int,
        capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
    ) -> None:
        self.backend = backend
        self.max_item_bytes = max_item_bytes
        self.capacity_bytes = capacity_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._held = 0
        # Reads answered from memory (for tests and the curious; not a metric).
        self.hits = 0

    @property
    def signs_urls(self) -> bool:
        return self.backend.signs_urls

    def __len__(self) -> int:
        return len(self._items)

    async def write(self, job_id: str, data: bytes, mime_type: str, seed: int) -> StoredArtifact:
        """Write to the backend; keep the bytes too when they are small enough."""
        stored = await self.backend.write(job_id, data, mime_type, seed)
        if len(data) <= min(self.max_item_bytes, self.capacity_bytes):
            self._forget(stored.path)
            self._items[stored.path] = data
            self._held += len(data)
            while self._held > self.capacity_bytes:
                _path, oldest = self._items.popitem(last=False)
                self._held -= len(oldest)
        return stored

    async def read(self, path: str) -> bytes:
        """From memory when the result is recent, else from the backend."""
        data = self._items.get(path)
        if data is not None:
            self.hits += 1
            return data
        return await self.backend.read(path)

    def chunks(self, path: str, offset: int, chunk_bytes: int) -> AsyncIterator[tuple[int, bytes]]:
        """Always from the backend: downloads are of results too large to keep here."""
        return self.backend.chunks(path, offset, chunk_bytes)

    async def exists(self, path: str) -> bool:
        """Whether the backend still has it (the cache never outlives a deletion)."""
        return await self.backend.exists(path)

    async def signed_url(self, path: str) -> SignedUrl | None:
        """The backend's presigned URL, if it can sign."""
        return await self.backend.signed_url(path)

    async def delete(self, path: str | None) -> None:
        """Delete from the backend and from memory."""
        if path:
            self._forget(path)
        await self.backend.delete(path)

    async def sweep(self, older_than: float) -> int:
        """The backend's sweep (see ArtifactStore.sweep)."""
        return await self.backend.sweep(older_than)

    async def close(self) -> None:
        """Drop the cache and close the backend."""
        self._items.clear()
        self._held = 0
        await self.backend.close()

    def _forget(self, path: str) -> None:
        data = self._items.pop(path, None)
        if data is not None:
            self._held -= len(data)
