"""Bad input over the HTTP face: 400 (404 for an unknown upload) with a message that starts
with the path of the field the client set and says what the field takes."""

from __future__ import annotations

import base64

import httpx
import pytest

from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
FOX = {"model": "flux-tiny", "prompt": "a fox"}
IMG2IMG = {"model": "flux-img2img-tiny", "prompt": "a fox"}
STEPS_RANGE = "steps: must be a whole number from 0 to 4294967295, got"
# Not a whole number at all: no range, since the model's is checked once the value parses.
NOT_WHOLE = "steps: must be a whole number, got"


def refusal(response: httpx.Response, status: int = 400) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == ("INVALID_ARGUMENT" if status == 400 else "NOT_FOUND")
    return body["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({**FOX, "steps": -1}, f"{STEPS_RANGE} -1"),
        ({**FOX, "steps": 4.5}, f"{NOT_WHOLE} 4.5"),
        ({**FOX, "webhook": {"url": "https://a.example", "bogus": 1}}, "webhook.bogus: "),
        ({**FOX, "image_id": "abc"}, "image_id: model 'flux-tiny' (FluxPipeline) takes no image"),
        ({**FOX, "adapters": [{"name": ""}]}, "adapters[0].name: required"),
        (
            {**IMG2IMG, "image": base64.b64encode(b"not a picture").decode()},
            "image: cannot be decoded as PNG, JPEG or WebP (not an image file)",
        ),
    ],
)
async def test_a_bad_json_value_is_400_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, object], message: str
) -> None:
    response = await client.post("/v1/jobs", json=body, headers=bearer(KEY_A))
    assert refusal(response).startswith(message)


async def test_an_unquoted_nan_is_400_naming_the_field(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/jobs",
        content=b'{"model": "flux-tiny", "prompt": "a fox", "steps": NaN}',
        headers={**bearer(KEY_A), "Content-Type": "application/json"},
    )
    assert refusal(response) == f"{NOT_WHOLE} NaN"


async def test_an_unknown_upload_is_404_naming_image_id(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/jobs", json={**IMG2IMG, "image_id": "abc"}, headers=bearer(KEY_A)
    )
    assert refusal(response, 404).startswith("image_id: no upload 'abc'")


async def test_a_form_field_sent_twice_is_400_naming_it(client: httpx.AsyncClient) -> None:
    urlencoded = await client.post(
        "/v1/jobs",
        content=b"model=echo&prompt=x&prompt=y",
        headers={**bearer(KEY_A), "Content-Type": "application/x-www-form-urlencoded"},
    )
    multipart = await client.post(
        "/v1/jobs",
        files=[("model", (None, b"echo")), ("prompt", (None, b"x")), ("prompt", (None, b"y"))],
        headers=bearer(KEY_A),
    )
    as_value_and_file = await client.post(
        "/v1/jobs",
        data={"model": "flux-img2img-tiny", "prompt": "x", "image": ""},
        files={"image": ("in.png", b"\x89PNG", "image/png")},
        headers=bearer(KEY_A),
    )
    for response, name in ((urlencoded, "prompt"), (multipart, "prompt")):
        assert refusal(response) == f"{name}: sent 2 times; send it once"
    assert refusal(as_value_and_file).startswith("image: sent 2 times")


async def test_a_json_key_given_twice_is_400_naming_it(client: httpx.AsyncClient) -> None:
    body = b'{"model": "flux-tiny", "prompt": "a fox", "steps": 1, "steps": 2}'
    headers = {**bearer(KEY_A), "Content-Type": "application/json"}
    response = await client.post("/v1/jobs", content=body, headers=headers)
    assert refusal(response) == "steps: given twice in one JSON object; give it once"


async def test_a_number_of_thousands_of_digits_is_400_not_500(client: httpx.AsyncClient) -> None:
    body = b'{"model": "flux-tiny", "prompt": "a fox", "seed": ' + b"9" * 5000 + b"}"
    headers = {**bearer(KEY_A), "Content-Type": "application/json"}
    response = await client.post("/v1/jobs", content=body, headers=headers)
    assert refusal(response).startswith("body: ")
