"""OpenAI's own fields as its client sends them: image fields the mesh cannot act on are
accepted at the values that change nothing and refused (naming the field and what is
accepted) at any other, alike on generations and edits; edits echo `size` as generations do;
video errors name `video_id`; unknown /v1 routes answer in OpenAI's error shape."""

from __future__ import annotations

import warnings

import httpx
import openai
import pytest

from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    base_url,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
    openai_client,
    png_bytes,
    video_when_ended,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
FAST = {"steps": 1}
# Values OpenAI's API takes that ask for nothing beyond what the mesh does anyway.
NO_OPS = [
    {"quality": "standard"},
    {"quality": "auto"},
    {"background": "auto"},
    {"background": "opaque"},
    {"moderation": "auto"},
    {"moderation": "low"},
    {"stream": False},
    {"partial_images": 0},
]
# Values the mesh cannot honour, and what the refusal must say.
REFUSED = [
    ({"quality": "hd"}, "quality", "auto or standard"),
    ({"quality": "high"}, "quality", "auto or standard"),
    ({"style": "vivid"}, "style", "leave it unset"),
    ({"background": "transparent"}, "background", "auto or opaque"),
    ({"moderation": "strict"}, "moderation", "auto or low"),
    ({"stream": True}, "stream", "false"),
    ({"partial_images": 2}, "partial_images", "0"),
]


def _image_file() -> tuple[str, bytes, str]:
    return ("in.png", png_bytes(), "image/png")


@pytest.mark.parametrize("fields", NO_OPS, ids=lambda f: "-".join(map(str, f.items())))
async def test_no_op_values_are_accepted_on_generations_and_edits(
    http_mesh: InProcessMesh,  # noqa: F811
    fields: dict,
) -> None:
    client = openai_client(http_mesh)
    made = await client.images.generate(
        model="flux-tiny", prompt="a fox", size="64x64", extra_body=FAST, **fields
    )
    assert made.data and made.data[0].b64_json
    edited = await client.images.edit(
        model="flux-img2img-tiny",
        image=_image_file(),
        prompt="a fox",
        size="64x64",
        # Not every one is among the client's edit parameters: sent as form fields all the
        # same, as a client of the raw API would.
        extra_body={**FAST, **fields},
    )
    assert edited.data and edited.data[0].b64_json
    await client.close()


async def test_edit_only_no_ops_and_a_null_n_are_accepted(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)
    edited = await client.images.edit(
        model="flux-img2img-tiny",
        image=_image_file(),
        prompt="a fox",
        size="64x64",
        input_fidelity="low",
        extra_body=FAST,
    )
    assert len(edited.data) == 1
    made = await client.images.generate(
        model="flux-tiny",
        prompt="a fox",
        size="64x64",
        n=None,
        style=None,
        extra_body=FAST,  # type: ignore[arg-type]
    )
    assert len(made.data) == 1
    await client.close()


@pytest.mark.parametrize(("fields", "param", "accepted"), REFUSED, ids=lambda v: str(v))
async def test_values_the_mesh_cannot_honour_are_refused_alike(
    http_mesh: InProcessMesh,  # noqa: F811
    fields: dict,
    param: str,
    accepted: str,
) -> None:
    client = openai_client(http_mesh)
    calls = {
        "generations": client.images.generate(
            model="flux-tiny", prompt="a fox", extra_body=FAST, **fields
        ),
        "edits": client.images.edit(
            model="flux-img2img-tiny",
            image=_image_file(),
            prompt="x",
            extra_body={**FAST, **fields},
        ),
    }
    for route, call in calls.items():
        with pytest.raises(openai.BadRequestError) as caught:
            await call
        error = caught.value.body
        assert isinstance(error, dict), route
        assert error["param"] == param and error["type"] == "invalid_request_error", (route, error)
        assert accepted in error["message"] and "is not offered" in error["message"], error
        assert "GenerateRequest" not in error["message"]
    await client.close()


async def test_high_input_fidelity_and_unknown_fields_are_refused_without_internal_names(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)
    with pytest.raises(openai.BadRequestError) as caught:
        await client.images.edit(
            model="flux-img2img-tiny", image=_image_file(), prompt="x", input_fidelity="high"
        )
    assert caught.value.body["param"] == "input_fidelity"  # type: ignore[index]
    for call in (
        client.images.edit(
            model="flux-img2img-tiny", image=_image_file(), prompt="x", extra_body={"colour": 1}
        ),
        client.images.generate(model="flux-tiny", prompt="x", extra_body={"colour": 1}),
        # A mesh field generations do not forward is refused, not ignored.
        client.images.generate(model="flux-tiny", prompt="x", extra_body={"width": 64}),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            await call
        error = caught.value.body
        assert isinstance(error, dict) and error["param"] in ("colour", "width"), error
        assert "not a field of image" in error["message"]
        assert "GenerateRequest" not in error["message"]
    await client.close()


async def test_edits_echo_the_size_as_generations_do(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)
    made = await client.images.generate(
        model="flux-tiny", prompt="a fox", size="64x64", extra_body=FAST
    )
    edited = await client.images.edit(
        model="flux-img2img-tiny", image=_image_file(), prompt="a fox", size="64x64",
        extra_body=FAST,
    )  # fmt: skip
    assert made.size == edited.size == "64x64"
    await client.close()


async def test_video_errors_name_video_id(http_mesh: InProcessMesh) -> None:  # noqa: F811
    warnings.simplefilter("ignore", DeprecationWarning)
    client = openai_client(http_mesh)
    with pytest.raises(openai.NotFoundError) as caught:
        await client.videos.retrieve("nope")
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "video_id", error
    assert error["message"].startswith("video_id:") and "job_id" not in error["message"]
    long = await client.videos.create(model="wan-tiny", prompt="long", extra_body={"steps": 50})
    await client.videos.delete(long.id)
    ended = await video_when_ended(client, long.id)
    assert ended.status == "failed"
    with pytest.raises(openai.APIStatusError) as caught:
        await client.videos.download_content(long.id)
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "video_id", error
    assert "job_id" not in error["message"]
    await client.close()


async def test_a_video_without_seconds_has_the_models_own_length(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    warnings.simplefilter("ignore", DeprecationWarning)
    client = openai_client(http_mesh)
    video = await client.videos.create(model="wan-tiny", prompt="w", extra_body={"steps": 1})
    # wan-tiny's own default clip (its registry num_frames at its fps), not OpenAI's 4 s: the
    # object says the length made.
    assert video.seconds == "0.625", video
    await client.close()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/chat/completions"),
        ("GET", "/v1/embeddings"),
        ("POST", "/v1/images/variations"),
        ("PUT", "/v1/videos"),
        ("POST", "/v1/models"),
    ],
)
async def test_unknown_openai_routes_answer_in_openais_shape(
    http_mesh: InProcessMesh,  # noqa: F811
    method: str,
    path: str,
) -> None:
    async with httpx.AsyncClient(base_url=base_url(http_mesh), headers=bearer(KEY_A)) as http:
        answer = await http.request(method, path, json={})
    assert answer.status_code in (404, 405), answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["message"]


async def test_the_openai_client_reads_an_unknown_route_as_not_found(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)
    with pytest.raises(openai.NotFoundError) as caught:
        await client.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "hi"}]
        )
    assert isinstance(caught.value.body, dict) and "Invalid URL" in caught.value.body["message"]
    await client.close()


async def test_the_mesh_keeps_its_own_error_shape_on_unknown_jobs_paths(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    async with httpx.AsyncClient(base_url=base_url(http_mesh), headers=bearer(KEY_A)) as http:
        missing = await http.get("/v1/jobs/nope/whatever")
        wrong_method = await http.put("/v1/jobs")
    assert missing.status_code == 404 and missing.json()["code"] == "NOT_FOUND"
    assert wrong_method.status_code == 405 and wrong_method.json()["code"] == "UNIMPLEMENTED"
