"""Form file parts as the HTTP routes read them: each is counted as sent even when empty
(and refused as empty), a video's input_reference beside an image part is refused rather
than one dropped, and an edit's mask sent as text is refused as the image is."""

from __future__ import annotations

import httpx
import pytest

from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    base_url,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
    png_bytes,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
EMPTY = "image: empty; send PNG, JPEG or WebP bytes"


async def refusal(http: httpx.AsyncClient, path: str, form: dict[str, str], files: dict) -> str:
    answer = await http.post(path, headers=bearer(KEY_A), data=form, files=files)
    assert answer.status_code == 400, answer.text
    body = answer.json()
    return str(body["error"]["message"] if "error" in body else body["message"])


async def test_an_empty_file_part_is_refused_as_empty(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    empty = {"image": ("empty.png", b"", "image/png")}
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        # A model that takes no image ran the job as if none was sent.
        text_only = {"model": "flux-tiny", "prompt": "x", "steps": "1"}
        assert await refusal(http, "/v1/jobs", text_only, empty) == EMPTY
        # One that needs it called it missing ("required").
        edit = {"model": "flux-img2img-tiny", "prompt": "x"}
        assert await refusal(http, "/v1/images/edits", edit, empty) == EMPTY


async def test_a_videos_input_reference_beside_an_image_part_is_refused(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    files = {
        "input_reference": ("a.png", png_bytes(), "image/png"),
        "image": ("b.png", png_bytes(), "image/png"),
    }
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        message = await refusal(http, "/v1/videos", {"prompt": "x", "steps": "2"}, files)
    assert message.startswith("input_reference: set input_reference or image, not both")


async def test_an_edits_mask_sent_as_text_is_refused_as_not_a_file_part(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    image = {"image": ("in.png", png_bytes(), "image/png")}
    form = {"model": "flux-img2img-tiny", "prompt": "x", "mask": "abc"}
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        message = await refusal(http, "/v1/images/edits", form, image)
    assert message.startswith("mask: send it as a file part")
