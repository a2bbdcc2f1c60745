"""Artifacts in an S3-compatible bucket, through obstore's async client.

Objects are named `<prefix>/<job id>.<extension>`; a `StoredArtifact`'s path is the key
below the prefix. A result is uploaded in one PUT (or a multipart upload for a large one),
which S3 makes visible whole or not at all, so no reader sees half an object.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

import obstore
from obstore.store import S3Store

from mediamesh.common.artifact_settings import ArtifactSettings
from mediamesh.common.output_formats import extension_for
from mediamesh.scheduler.store.artifacts import RESULT_NAME, SignedUrl, StoredArtifact

if TYPE_CHECKING:
    # Type-only in obstore: not importable at run time.
    from obstore.store import S3Config


def _bucket(
    settings: ArtifactSettings, endpoint: str | None, environ: Mapping[str, str]
) -> S3Store:
    """The configured bucket as seen through `endpoint` (None: AWS S3 in the region)."""
    # The standard AWS variables, passed on; without them obstore's own credential chain
    # (instance roles, web identity) applies.
    config: S3Config = {"region": settings.region}
    if endpoint:
        config["endpoint"] = endpoint
    if key_id := environ.get("AWS_ACCESS_KEY_ID"):
        config["access_key_id"] = key_id
    if secret := environ.get("AWS_SECRET_ACCESS_KEY"):
        config["secret_access_key"] = secret
    if token := environ.get("AWS_SESSION_TOKEN"):
        config["session_token"] = token
    return S3Store(
        settings.bucket,
        prefix=settings.prefix.strip("/") or None,
        config=config,
        # A local S3-compatible service (MinIO, tests) may speak plain HTTP; AWS never.
        client_options={"allow_http": bool(endpoint and endpoint.startswith("http://"))},
    )


class S3ArtifactStore:
    """Results as objects in one bucket; presigned GET URLs for clients without credentials."""

    signs_urls = True

    def __init__(self, settings: ArtifactSettings, environ: Mapping[str, str]) -> None:
        self._store = _bucket(settings, settings.endpoint_url, environ)
        # Signing is local arithmetic: this store never sends a request, it only names the
        # host that clients will send theirs to.
        public = settings.public_endpoint_url
        self._signer = _bucket(settings, public, environ) if public else self._store
        self._expiry = timedelta(seconds=settings.url_expiry_s)

    async def write(self, job_id: str, data: bytes, mime_type: str, seed: int) -> StoredArtifact:
        """Upload the result with its content type, so a presigned GET serves it right."""
        key = f"{job_id}.{extension_for(mime_type)}"
        await obstore.put_async(self._store, key, data, attributes={"Content-Type": mime_type})
        digest = hashlib.sha256(data).hexdigest()
        return StoredArtifact(key, mime_type, len(data), digest, seed)

    async def read(self, path: str) -> bytes:
        """The whole object."""
        result = await obstore.get_async(self._store, path)
        return bytes(await result.bytes_async())

    async def chunks(
        self, path: str, offset: int, chunk_bytes: int
    ) -> AsyncIterator[tuple[int, bytes]]:
        """The object from `offset`, one ranged GET per chunk: each stays within
        `chunk_bytes` whatever the service's own chunking."""
        size = (await obstore.head_async(self._store, path))["size"]
        while offset < size:
            length = min(chunk_bytes, size - offset)
            data = await obstore.get_range_async(self._store, path, start=offset, length=length)
            yield offset, bytes(data)
            offset += length

    async def exists(self, path: str) -> bool:
        """Whether the object is there (a HEAD request)."""
        try:
            await obstore.head_async(self._store, path)
        except FileNotFoundError:
            return False
        return True

    async def signed_url(self, path: str) -> SignedUrl | None:
        """A presigned GET URL valid for `url_expiry_s`."""
        expires_ms = int((time.time() + self._expiry.total_seconds()) * 1000)
        url = await obstore.sign_async(self._signer, "GET", path, self._expiry)
        return SignedUrl(url, expires_ms)

    async def delete(self, path: str | None) -> None:
        """Delete the object; S3 answers a missing key with success too."""
        if path:
            try:
                await obstore.delete_async(self._store, path)
            except FileNotFoundError:
                return

    async def sweep(self, older_than: float) -> int:
        """Delete the result objects directly under the prefix last modified before
        `older_than`; other keys there are left alone."""
        stale = []
        async for page in obstore.list(self._store, chunk_size=1000):
            for meta in page:
                key = meta["path"]
                if RESULT_NAME.fullmatch(key) and meta["last_modified"].timestamp() < older_than:
                    stale.append(key)
        for key in stale:
            await self.delete(key)
        return len(stale)

    async def close(self) -> None:
        """obstore's client holds no resources that need releasing."""
