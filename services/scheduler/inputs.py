"""A job's input images, kept with the job until it has ended.

At submit the request's images (sent inline or named by upload id) are checked once more
by decoding them, then stored: an image up to `inline_bytes` inside the job itself (its
`InputImage.ref` carries the bytes, so the job's row in the store holds them), a larger one
as a file in the artifact store's `inputs` folder, which workers read. Either way a
restarted scheduler or a preempted job finds its inputs again. The files are
content-addressed (input_files.py): jobs sending the same bytes, or naming the same upload,
share one copy on disk. A job's files go once its end is in the store (the store writer
removes them); files no job owns (a submit that failed after writing them, a crash before
the removal) are swept once older than the retention.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from mediamesh.common.generation import GenerationParams, InputImage
from mediamesh.common.input_images import ID_FIELDS, decode_image, input_field
from mediamesh.common.input_refs import inline_ref
from mediamesh.common.output_formats import extension_for
from mediamesh.common.params import RequestFields
from mediamesh.common.registry import ModelSpec
from mediamesh.common.settings import SchedulerSettings
from mediamesh.scheduler.input_files import InputFiles, input_paths, release
from mediamesh.scheduler.uploads import UploadLimits, UploadStore

INPUT_FIELDS = ("image", "mask_image")


class JobInputs:
    """Stores and deletes the input images of jobs."""

    def __init__(self, folder: Path, inline_bytes: int, uploads: UploadStore) -> None:
        self.folder = folder
        self.inline_bytes = inline_bytes
        self.uploads = uploads
        self.files = InputFiles(folder)

    async def with_uploads(self, fields: RequestFields, tenant: str) -> RequestFields:
        """`fields` with each upload's bytes read in beside its id (listed in `from_uploads`);
        NOT_FOUND naming the id field for an id that is unknown, expired or another tenant's."""
        for name in INPUT_FIELDS:
            id_field = ID_FIELDS[name]
            input_id = getattr(fields, id_field)
            if not input_id or getattr(fields, name):
                continue  # no id, or both set: `resolve` refuses the pair, naming it
            upload = self.uploads.get(input_id, tenant, id_field)
            data = await asyncio.to_thread(self.uploads.read, upload, id_field)
            uploaded = fields.from_uploads | {name}
            if name == "image":
                fields = replace(fields, image=data, from_uploads=uploaded)
            else:
                fields = replace(fields, mask_image=data, from_uploads=uploaded)
        return fields

    async def store(
        self, spec: ModelSpec, params: GenerationParams, fields: RequestFields
    ) -> GenerationParams:
        """`params` with each input decoded once (INVALID_ARGUMENT naming the field the caller
        set, for bytes broken past their header) and stored; its refs name where."""
        for name in INPUT_FIELDS:
            image: InputImage | None = getattr(params, name)
            data: bytes | None = getattr(fields, name)
            if image is None or not data:
                continue
            field = input_field(name, getattr(fields, ID_FIELDS[name]))
            await asyncio.to_thread(decode_image, field, data, spec.limits.max_input_pixels)
            ref = await asyncio.to_thread(self._keep, name, image, data)
            kept = replace(image, ref=ref)
            if name == "image":
                params = replace(params, image=kept)
            else:
                params = replace(params, mask_image=kept)
        return params

    def _keep(self, name: str, image: InputImage, data: bytes) -> str:
        if len(data) <= self.inline_bytes:
            return inline_ref(data)
        return str(self.files.keep(image.sha256, name, extension_for(image.mime_type), data))

    def files_of(self, params: GenerationParams) -> list[Path]:
        """The files holding the inputs of a job with `params` (inline inputs have none)."""
        return input_paths(params)

    def discard(self, params: GenerationParams) -> None:
        """Delete the files just stored for a job that was not accepted (or a duplicate: the
        earlier job has files of its own, links to the same copy)."""
        self.delete(self.files_of(params))

    def delete(self, paths: Iterable[Path]) -> None:
        """Delete job input files (blocking), and a copy no job file links to any more;
        missing ones are fine."""
        release(paths)

    def sweep(self, owned: set[Path], older_than: float) -> None:
        """Delete input files no job in `owned` refers to, and copies no job file links to,
        older than `older_than` (Unix s)."""
        self.files.sweep(owned, older_than)

    def tidy(self, kept: Iterable[GenerationParams], older_than: float) -> None:
        """Housekeeping (blocking): delete expired uploads, and input files that none of the
        `kept` jobs owns and that are older than `older_than`."""
        self.uploads.sweep()
        owned = {path for params in kept for path in self.files_of(params)}
        self.sweep(owned, older_than)


def job_inputs(artifact_root: Path, settings: SchedulerSettings) -> JobInputs:
    """The job inputs and uploads of a scheduler, in its artifact store."""
    limits = UploadLimits(
        ttl_s=settings.upload_ttl_s,
        quota_bytes=settings.upload_quota_bytes,
        max_bytes=settings.max_upload_bytes,
    )
    uploads = UploadStore(artifact_root / "uploads", limits)
    return JobInputs(artifact_root / "inputs", settings.inline_input_bytes, uploads)
