"""OpenAI's `size` in an images answer is the images' size, as OpenAI gives it: echoing the
request told a client nothing for `auto` or no size, and repeated `064x064` as sent."""

from __future__ import annotations

import pytest

from tests.service.conftest import InProcessMesh
from tests.service.gateway.http_support import (
    http_mesh,  # noqa: F401 (a fixture)
    openai_client,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.mark.parametrize(
    ("asked", "said"), [("auto", "64x64"), (None, "64x64"), ("032x048", "32x48")]
)
async def test_the_answer_says_the_size_made(
    http_mesh: InProcessMesh,  # noqa: F811
    asked: str | None,
    said: str,
) -> None:
    # OpenAI's `size` in an images answer is the images' size: echoing "auto" told nothing.
    client = openai_client(http_mesh)
    answer = await client.images.generate(
        model="flux-tiny",
        prompt="a fox",
        extra_body={"steps": 1, **({"size": asked} if asked else {})},
    )
    assert answer.size == said
