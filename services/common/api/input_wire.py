"""A job's input images on the Worker service's wire (JobSpec.image, JobSpec.mask_image)."""

from __future__ import annotations

from mediamesh.common.generated.v1 import worker_pb2
from mediamesh.common.generation import InputImage
from mediamesh.common.input_refs import inline_bytes, inline_ref, is_inline


def input_ref(image: InputImage | None) -> worker_pb2.InputRef | None:
    """The InputRef sending `image`: its bytes when they travel inline, else its path in the
    artifact store, with the SHA-256 the worker checks after reading."""
    if image is None:
        return None
    if is_inline(image.ref):
        return worker_pb2.InputRef(data=inline_bytes(image.ref), sha256=image.sha256)
    return worker_pb2.InputRef(artifact=image.ref, sha256=image.sha256)


def input_image(ref: worker_pb2.InputRef) -> InputImage | None:
    """The InputImage a received InputRef names, or None for an empty one. Its size is not on
    the wire: 0 until the worker reads the image's header (`worker.models.inputs`)."""
    if ref.data:
        return InputImage(
            sha256=ref.sha256, width=0, height=0, mime_type="", ref=inline_ref(ref.data)
        )
    if ref.artifact:
        return InputImage(sha256=ref.sha256, width=0, height=0, mime_type="", ref=ref.artifact)
    return None
