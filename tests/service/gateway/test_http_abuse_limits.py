"""What a caller of the HTTP face cannot make it do, over real HTTP: decode an edit mask over
its model's limit or before the request is admitted, answer deeply nested JSON with a 500,
crash the signed-link check, or forge a log line through OpenAI's `user`. Each refusal is
a JSON error naming the field and the limit."""

from __future__ import annotations

import logging

import httpx
import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.gateway.http import openai_mask
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    KEY_SLOW,
    base_url,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
    png_bytes,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
# sdxl-inpaint-tiny takes a mask of at most 512 x 512 pixels (limits.max_input_pixels).
INPAINT, INPAINT_PIXELS = "sdxl-inpaint-tiny", 262_144


@pytest.fixture
def no_decoding(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Makes decoding an edit mask fail the request, and records each attempt."""
    attempts: list[str] = []

    def refuse(field: str, data: bytes, max_pixels: int):
        attempts.append(field)
        raise InvalidArgument(f"{field}: decoded (the test forbids it)")

    monkeypatch.setattr(openai_mask, "decode_image", refuse)
    return attempts


async def edit(mesh: InProcessMesh, key: str, mask: bytes, **form: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base_url(mesh), timeout=60) as http:
        return await http.post(
            "/v1/images/edits",
            headers=bearer(key),
            data={"model": INPAINT, "prompt": "x", **form},
            files={"image": ("in.png", png_bytes(), "image/png"), "mask": ("m.png", mask)},
        )


async def test_a_mask_over_the_models_pixel_limit_is_refused_from_its_header(
    http_mesh: InProcessMesh,  # noqa: F811
    no_decoding: list[str],
):
    answer = await edit(http_mesh, KEY_A, png_bytes(1024, 1024, alpha=True))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "mask"
    assert error["message"] == (
        f"mask: 1024x1024 px is 1048576 pixels; the limit is {INPAINT_PIXELS} pixels "
        "(limits.max_input_pixels)"
    )
    assert not no_decoding


async def test_a_mask_is_decoded_only_once_the_request_is_admitted(
    http_mesh: InProcessMesh,  # noqa: F811
    no_decoding: list[str],
):
    # Two images for a tenant whose burst is one: refused by admission, mask undecoded.
    answer = await edit(http_mesh, KEY_SLOW, png_bytes(64, 64, alpha=True), n="2")
    assert answer.status_code == 429, answer.text
    assert answer.json()["error"]["param"] == "n"
    assert not no_decoding
    # Admitted, it is decoded (here: refused by the spy, which shows it ran).
    answer = await edit(http_mesh, KEY_A, png_bytes(64, 64, alpha=True))
    assert answer.status_code == 400 and no_decoding == ["mask"]


async def test_deeply_nested_json_is_a_400_naming_the_body(
    http_mesh: InProcessMesh,  # noqa: F811
):
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        for depth in (100, 100_000):
            answer = await http.post(
                "/v1/jobs",
                headers={**bearer(KEY_A), "content-type": "application/json"},
                content=b"[" * depth + b"]" * depth,
            )
            assert answer.status_code == 400, answer.text
            assert answer.json() == {
                "code": "INVALID_ARGUMENT",
                "message": "body: JSON nested more than 64 levels deep",
            }


async def test_a_signature_that_is_not_ascii_hex_is_a_403_naming_it(
    http_mesh: InProcessMesh,  # noqa: F811
):
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        answer = await http.get(
            "/v1/jobs/job1/result",
            params={"tenant": "a", "expires": "9999999999", "signature": "é" * 64},
        )
    assert answer.status_code == 403, answer.text
    assert answer.json()["message"].startswith("signature: not a link's signature")


async def test_an_end_user_with_control_characters_is_refused_naming_user(
    http_mesh: InProcessMesh,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
):
    forged = "bob\n2026-01-01 00:00:00,000 gateway INFO forged line"
    caplog.set_level(logging.INFO, logger="mediamesh.gateway.openai")
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        answer = await http.post(
            "/v1/images/generations",
            headers=bearer(KEY_A),
            json={"model": "flux-tiny", "prompt": "x", "user": forged},
        )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "user"
    assert error["message"].startswith("user: a control character (U+000A) at position 4")
    assert not [r for r in caplog.records if "end user" in r.getMessage()]
    answer = await edit(http_mesh, KEY_A, png_bytes(64, 64, alpha=True), user="carol\r")
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "user"
