"""Small results kept in the job store (SQLite) instead of as one file or object each.

The profile of an echo mesh under load showed the per-result file (a write, a rename and
the thread hand-offs around them) as the scheduler's largest single cost, more than
admitting, queueing and dispatching the job together. A result of up to
`max_bytes` is queued to the `StoreWriter` instead: it commits in the same transaction as
(or one before) the job state that announces it, so it costs no write of its own and no
extra thread hop, and a restart never finds a succeeded job without its bytes.

Results larger than that, and every result when `max_bytes` is 0, go to the backend as
before. When the backend cannot take one (a bucket that is unreachable, even after its
client's retries), the result is kept here all the same: the work that made it is done,
and a job store that can take the job's end can take its bytes (SQLite holds up to 1 GB
in a value, beyond any message a worker may send).

A presigned URL needs an object the backend can sign, so a result kept here that
is wanted as a URL is copied to the backend once, and the copy is recorded in the store
so that its deletion (at retention) deletes the copy too. A copy the backend refuses (the
bucket that made the result fall back here is often still down) leaves the answer without
a URL, the result served as any kept here is; the next read tries the copy again.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator

from mediamesh.common.log_throttle import LogThrottle
from mediamesh.scheduler import metrics
from mediamesh.scheduler.store.artifacts import ArtifactStore, SignedUrl, StoredArtifact
from mediamesh.scheduler.store.job_store import JobStore
from mediamesh.scheduler.store.writer import StoreWriter

log = logging.getLogger("mediamesh.scheduler")
# The path of a result kept in the store, "jobstore:<job id>/<mime type>": never a file path
# or an object key, and with what a copy to the backend needs after a restart.
IN_STORE_PREFIX = "jobstore:"


def in_store_path(job_id: str, mime_type: str) -> str:
    return f"{IN_STORE_PREFIX}{job_id}/{mime_type}"


def in_store_job(path: str) -> tuple[str, str] | None:
    """(job id, mime type) of a result kept in the store, or None for a backend path."""
    if not path.startswith(IN_STORE_PREFIX):
        return None
    job_id, _, mime_type = path[len(IN_STORE_PREFIX) :].partition("/")
    return job_id, mime_type


class InStoreResults:
    """An ArtifactStore that keeps results of up to `max_bytes` in the job store."""

    def __init__(
        self, backend: ArtifactStore, store: JobStore, writer: StoreWriter, max_bytes: int
    ) -> None:
        self.backend = backend
        self.store = store
        self.writer = writer
        self.max_bytes = max_bytes
        # A down bucket refuses the copy on every read of every such job: one line a minute.
        self._copy_failure_log = LogThrottle()

    @property
    def signs_urls(self) -> bool:
        return self.backend.signs_urls

    async def write(self, job_id: str, data: bytes, mime_type: str, seed: int) -> StoredArtifact:
        """Queue a small result to the store's writer; hand a larger one to the backend,
        or keep it here too when the backend fails."""
        if len(data) > self.max_bytes:
            try:
                return await self.backend.write(job_id, data, mime_type, seed)
            except Exception as exc:  # each backend fails its own way (OSError, obstore's)
                metrics.RESULT_STORE_FALLBACKS.inc()
                log.error(
                    "the artifact store could not take the result of job %s (%d bytes): %s; "
                    "it is kept in the job store instead",
                    job_id,
                    len(data),
                    exc,
                )
        self.writer.save_result(job_id, data)
        digest = hashlib.sha256(data).hexdigest()
        return StoredArtifact(in_store_path(job_id, mime_type), mime_type, len(data), digest, seed)

    async def read(self, path: str) -> bytes:
        """The result's bytes; FileNotFoundError once deleted, as from any backend."""
        kept = in_store_job(path)
        if kept is None:
            return await self.backend.read(path)
        job_id = kept[0]
        data = self.writer.unsaved_result(job_id)
        if data is None:
            data = await self.store.read_result(job_id)
        if data is None:
            raise FileNotFoundError(path)
        return data

    async def chunks(
        self, path: str, offset: int, chunk_bytes: int
    ) -> AsyncIterator[tuple[int, bytes]]:
        """Slices of the bytes for a result kept here (small by definition)."""
        if in_store_job(path) is None:
            async for item in self.backend.chunks(path, offset, chunk_bytes):
                yield item
            return
        data = await self.read(path)
        for start in range(offset, len(data), chunk_bytes):
            yield start, data[start : start + chunk_bytes]

    async def exists(self, path: str) -> bool:
        """Whether the result is still kept (not deleted after its retention)."""
        kept = in_store_job(path)
        if kept is None:
            return await self.backend.exists(path)
        job_id = kept[0]
        return self.writer.unsaved_result(job_id) is not None or await self.store.has_result(job_id)

    async def signed_url(self, path: str) -> SignedUrl | None:
        """The backend's presigned URL; a result kept here is copied to the backend first,
        once, when the backend can sign at all."""
        kept = in_store_job(path)
        if kept is None:
            return await self.backend.signed_url(path)
        if not self.backend.signs_urls:
            return None
        job_id, mime_type = kept
        copy = await self.store.result_copied_to(job_id)
        if copy is None:
            try:
                copy = await self._copy_to_backend(job_id, path, mime_type)
            except Exception as exc:  # each backend fails its own way (OSError, obstore's)
                if self._copy_failure_log.due():
                    log.warning(
                        "copying the result of job %s kept in the job store to the artifact "
                        "store failed: %s; it is answered without a URL until a later read's "
                        "copy succeeds",
                        job_id,
                        exc,
                    )
                return None
        return await self.backend.signed_url(copy)

    async def _copy_to_backend(self, job_id: str, path: str, mime_type: str) -> str:
        """Copy a kept result to the backend and record where; the copy's path."""
        # The seed is not part of the object; the job's record keeps it.
        stored = await self.backend.write(job_id, await self.read(path), mime_type, 0)
        await self.store.set_result_copied_to(job_id, stored.path)
        return stored.path

    async def delete(self, path: str | None) -> None:
        """Delete the result, and any copy of it made for a URL."""
        kept = in_store_job(path) if path else None
        if kept is None:
            await self.backend.delete(path)
            return
        job_id = kept[0]
        self.writer.forget_result(job_id)
        for copy in await self.store.delete_result(job_id):
            await self.backend.delete(copy)

    async def sweep(self, older_than: float) -> int:
        """The backend's sweep (see ArtifactStore.sweep)."""
        return await self.backend.sweep(older_than)

    async def close(self) -> None:
        """Close the backend (the job store is closed by its owner)."""
        await self.backend.close()
