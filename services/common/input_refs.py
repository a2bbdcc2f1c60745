"""Where a job's input image is kept, as the string in `InputImage.ref`.

Small inputs travel with the job itself: `inline:` and their bytes in base64, stored in the
job's row and sent inside the JobSpec. Larger ones are files in the artifact store, which
the scheduler and every worker reach; the ref is then the file's path.

Once a job has ended nothing reads its inputs again, so the scheduler keeps it in memory
without the inline bytes (`without_inline_bytes`: the ref is then empty, the image's
identity stays); its row in the store still carries them until retention. Its files are
removed once its end is stored (the scheduler's input_files.py): the path in an ended job's
ref names a file that may be gone.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import replace

from mediamesh.common.generation import GenerationParams, InputImage

INLINE_PREFIX = "inline:"


def inline_ref(data: bytes) -> str:
    """The ref that carries `data` itself."""
    return INLINE_PREFIX + base64.b64encode(data).decode("ascii")


def is_inline(ref: str) -> bool:
    """Whether `ref` carries its bytes (else it is a path in the artifact store)."""
    return ref.startswith(INLINE_PREFIX)


def inline_bytes(ref: str) -> bytes:
    """The bytes an inline ref carries; ValueError for a ref that is not one."""
    if not is_inline(ref):
        raise ValueError("not an inline input ref")
    try:
        return base64.b64decode(ref[len(INLINE_PREFIX) :], validate=True)
    except binascii.Error as exc:
        raise ValueError(f"inline input ref is not base64: {exc}") from None


def without_inline_bytes(params: GenerationParams) -> GenerationParams:
    """`params` with every inline input's ref emptied; `params` itself when none is inline,
    so a job without inline inputs keeps the very object (and whatever is cached by it)."""
    image, mask = params.image, params.mask_image
    if not _carries_bytes(image) and not _carries_bytes(mask):
        return params
    return replace(params, image=_emptied(image), mask_image=_emptied(mask))


def _carries_bytes(image: InputImage | None) -> bool:
    return image is not None and is_inline(image.ref)


def _emptied(image: InputImage | None) -> InputImage | None:
    return replace(image, ref="") if image is not None and is_inline(image.ref) else image
