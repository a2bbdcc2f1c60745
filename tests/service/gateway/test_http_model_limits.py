"""What a page needs to hint a model's limits before it submits: /v1/models carries the
registry's frame multiple and input-image size too, and a value of the wrong type is
refused quoting the range the model takes, not the range of the field's protobuf type."""

from __future__ import annotations

import httpx
import pytest

from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    base_url,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_models_list_the_frame_multiple_and_input_pixel_limits(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    async with httpx.AsyncClient(base_url=base_url(http_mesh), headers=bearer(KEY_A)) as http:
        listed = {m["id"]: m for m in (await http.get("/v1/models")).json()["data"]}
        one = (await http.get("/v1/models/wan-tiny")).json()
    assert listed["wan-tiny"]["limits"]["frame_multiple"] == 4
    assert one["limits"] == listed["wan-tiny"]["limits"]
    assert listed["flux-img2img-tiny"]["limits"]["max_input_pixels"] == 512 * 512
    assert listed["echo"]["limits"]["frame_multiple"] == 1


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        # Not a whole number: no range, as the type's (0 to 4294967295) would mislead.
        ("steps", 2.5, "steps: must be a whole number, got 2.5"),
        ("width", "wide", 'width: must be a whole number, got "wide"'),
        # A whole number: the model's own range, checked once the request parses.
        ("steps", 9, "steps: 9 is out of range; allowed 1..8"),
    ],
)
async def test_a_value_of_the_wrong_type_never_quotes_the_wire_types_range(
    http_mesh: InProcessMesh,  # noqa: F811
    field: str,
    value: object,
    words: str,
) -> None:
    body = {"model": "echo", "prompt": "x", field: value}
    async with httpx.AsyncClient(base_url=base_url(http_mesh), headers=bearer(KEY_A)) as http:
        as_json = await http.post("/v1/jobs", json=body)
        form = {name: str(v) if not isinstance(v, str) else v for name, v in body.items()}
        as_form = await http.post("/v1/jobs", data=form)
    assert as_json.status_code == 400, as_json.text
    assert as_json.json()["message"].startswith(words), as_json.text
    assert as_form.status_code == 400, as_form.text
    if isinstance(value, str):
        return  # a form value that is not JSON is refused before its type is checked
    assert as_form.json()["message"].startswith(words)
