"""Uploaded inputs: large images streamed in chunks ahead of the request that names them.

Each upload is a file in the artifact store's `uploads` folder with a small JSON record
beside it (tenant, size, SHA-256, expiry), so a restarted scheduler still knows its uploads.
An upload belongs to its tenant: another tenant's id is NOT_FOUND, as is an expired one.
A tenant's live uploads (and those still streaming) count against its quota. Expired
uploads are deleted by the scheduler's housekeeping (`sweep`).

File access happens in threads (the caller's `asyncio.to_thread`); the bookkeeping is
guarded by a lock because those threads run concurrently.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from mediamesh.common.errors import (
    InvalidArgument,
    MeshError,
    NotFound,
    PayloadTooLarge,
    StatusCode,
)
from mediamesh.common.errors import ResourceExhausted as QuotaExceeded
from mediamesh.common.input_images import SNIFF_BYTES, check_upload_mime, sniffed_mime

_DATA = ".bin"
_RECORD = ".json"
_PARTIAL = ".partial"


@dataclass(frozen=True)
class StoredUpload:
    """A finished upload."""

    input_id: str
    tenant: str
    size_bytes: int
    sha256: str
    mime_type: str
    expires_at: float


@dataclass(frozen=True)
class UploadLimits:
    """How long uploads live and how much a tenant and one upload may hold."""

    ttl_s: float
    quota_bytes: int
    max_bytes: int


class UploadStore:
    """Every tenant's uploads, on disk under `folder`."""

    def __init__(
        self, folder: Path, limits: UploadLimits, clock: Callable[[], float] = time.time
    ) -> None:
        self.folder = folder
        self.limits = limits
        self._clock = clock
        self._lock = threading.Lock()
        self._uploads: dict[str, StoredUpload] = {}
        # Bytes of uploads still streaming, by tenant: they count against the quota too.
        self._streaming: dict[str, int] = {}

    def load(self) -> None:
        """Read the records of uploads a previous run stored (blocking: call in a thread)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for record in self.folder.glob(f"*{_RECORD}"):
            try:
                upload = StoredUpload(**json.loads(record.read_text()))
            except (OSError, ValueError, TypeError):
                continue  # a record torn by a crash; `sweep` removes its files later
            if (self.folder / f"{upload.input_id}{_DATA}").is_file():
                with self._lock:
                    self._uploads[upload.input_id] = upload

    def usage(self, tenant: str) -> int:
        """Bytes the tenant holds in live and streaming uploads."""
        with self._lock:
            return self._usage(tenant)

    def _usage(self, tenant: str) -> int:
        now = self._clock()
        live = sum(
            u.size_bytes
            for u in self._uploads.values()
            if u.tenant == tenant and u.expires_at > now
        )
        return live + self._streaming.get(tenant, 0)

    def begin(self, tenant: str, sha256: str, mime_type: str, quota_bytes: int) -> UploadWriter:
        """A writer for a new upload of `tenant`; `quota_bytes` 0 takes the default quota.
        InvalidArgument for a `mime_type` that is no input format ("" leaves it to the bytes)."""
        if not sha256:
            raise InvalidArgument("sha256: required on the first chunk of an upload")
        check_upload_mime(mime_type)
        self.folder.mkdir(parents=True, exist_ok=True)
        quota = quota_bytes or self.limits.quota_bytes
        return UploadWriter(self, tenant, sha256, mime_type, quota)

    def _reserve(self, tenant: str, size: int, quota: int) -> None:
        with self._lock:
            used = self._usage(tenant)
            if used + size > quota:
                raise QuotaExceeded(
                    f"upload_quota_bytes: tenant {tenant!r} would hold {used + size} bytes of "
                    f"uploads; its quota is {quota} bytes (uploads expire after "
                    f"{self.limits.ttl_s:g} s)"
                )
            self._streaming[tenant] = self._streaming.get(tenant, 0) + size

    def _release(self, tenant: str, size: int) -> None:
        with self._lock:
            left = self._streaming.get(tenant, 0) - size
            if left > 0:
                self._streaming[tenant] = left
            else:
                self._streaming.pop(tenant, None)

    def _add(self, upload: StoredUpload) -> None:
        record = self.folder / f"{upload.input_id}{_RECORD}"
        partial = record.with_suffix(_PARTIAL)
        partial.write_text(json.dumps(asdict(upload)))
        partial.replace(record)
        with self._lock:
            self._uploads[upload.input_id] = upload

    def get(self, input_id: str, tenant: str, field: str = "input_id") -> StoredUpload:
        """The tenant's live upload; NOT_FOUND (the same answer) for an unknown id, another
        tenant's upload and an expired one, naming `field`, the one that held the id."""
        with self._lock:
            upload = self._uploads.get(input_id)
        if upload is None or upload.tenant != tenant or upload.expires_at <= self._clock():
            raise NotFound(f"{field}: no upload {input_id!r} (unknown, expired or not yours)")
        return upload

    def read(self, upload: StoredUpload, field: str = "input_id") -> bytes:
        """The upload's bytes (blocking: call in a thread); NOT_FOUND naming `field` when
        its file has gone."""
        try:
            return (self.folder / f"{upload.input_id}{_DATA}").read_bytes()
        except FileNotFoundError:
            raise NotFound(f"{field}: upload {upload.input_id!r} is gone (expired)") from None

    def sweep(self) -> list[str]:
        """Delete expired uploads and files no live upload owns (blocking: call in a thread);
        returns the ids of the uploads deleted."""
        now = self._clock()
        with self._lock:
            expired = [u.input_id for u in self._uploads.values() if u.expires_at <= now]
            for input_id in expired:
                del self._uploads[input_id]
            live = set(self._uploads)
        if not self.folder.exists():
            return expired
        for path in self.folder.iterdir():
            input_id = path.name.split(".", 1)[0]
            stale = path.stat().st_mtime < now - self.limits.ttl_s
            if input_id in live or (path.suffix == _PARTIAL and not stale):
                continue  # live, or still streaming
            if input_id in expired or stale:
                path.unlink(missing_ok=True)
        return expired


class UploadWriter:
    """One upload being streamed: appends chunks, then checks the SHA-256 at the end."""

    def __init__(
        self, store: UploadStore, tenant: str, sha256: str, mime_type: str, quota: int
    ) -> None:
        self.store = store
        self.tenant = tenant
        self.sha256 = sha256
        self.mime_type = mime_type
        self.quota = quota
        self.input_id = f"up-{uuid.uuid4().hex}"
        self.size = 0
        # The leading bytes, which tell the format, however the upload was cut into chunks.
        self._head = b""
        self._digest = hashlib.sha256()
        self._path = store.folder / f"{self.input_id}{_DATA}{_PARTIAL}"
        self._file = self._path.open("wb")

    def write(self, data: bytes) -> None:
        """Append one chunk (blocking); refuses an upload over the size limit or the quota."""
        if self.size + len(data) > self.store.limits.max_bytes:
            raise PayloadTooLarge(
                f"data: the upload is over {self.store.limits.max_bytes} bytes (max_upload_bytes)"
            )
        self.store._reserve(self.tenant, len(data), self.quota)
        self.size += len(data)
        if len(self._head) < SNIFF_BYTES:
            self._head += data[: SNIFF_BYTES - len(self._head)]
        self._digest.update(data)
        self._file.write(data)

    def finish(self) -> StoredUpload:
        """The stored upload; DATA_LOSS when the bytes do not hash to the declared SHA-256,
        INVALID_ARGUMENT when they start no PNG, JPEG or WebP file, or another format than
        the declared `mime_type` (a job would only find that out when it decodes them)."""
        self._file.close()
        try:
            digest = self._digest.hexdigest()
            if digest != self.sha256:
                raise MeshError(
                    f"sha256: the uploaded bytes hash to {digest}, not {self.sha256}; upload again",
                    code=StatusCode.DATA_LOSS,
                )
            if self.size == 0:
                raise InvalidArgument("data: the upload is empty")
            mime_type = self._checked_mime()
            self._path.replace(self.store.folder / f"{self.input_id}{_DATA}")
            upload = StoredUpload(
                input_id=self.input_id,
                tenant=self.tenant,
                size_bytes=self.size,
                sha256=digest,
                mime_type=mime_type,
                expires_at=self.store._clock() + self.store.limits.ttl_s,
            )
            self.store._add(upload)
            return upload
        except BaseException:
            self._path.unlink(missing_ok=True)
            raise
        finally:
            self.store._release(self.tenant, self.size)

    def _checked_mime(self) -> str:
        found = sniffed_mime(self._head)
        declared = f" (declared as {self.mime_type})" if self.mime_type else ""
        if found is None:
            raise InvalidArgument(f"data: not a PNG, JPEG or WebP file{declared}")
        if self.mime_type and found != self.mime_type:
            raise InvalidArgument(
                f"mime_type: {self.mime_type} does not match the bytes, which are {found}; "
                f"declare {found} or leave mime_type empty"
            )
        return found

    def abort(self) -> None:
        """Drop an upload that did not finish."""
        if not self._file.closed:
            self._file.close()
            self.store._release(self.tenant, self.size)
        self._path.unlink(missing_ok=True)
