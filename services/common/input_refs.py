"""Where a job's input image is kept, as the string in `InputImage.ref`.

Small inputs travel with the job itself: `inline:` and their bytes in base64, stored in the
job's row and sent inside the JobSpec. Larger ones are files in the artifact store, which
the scheduler and every worker reach; the ref is then the file's path.
"""

from __future__ import annotations

import base64
import binascii

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
