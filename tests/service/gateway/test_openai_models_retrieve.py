"""GET /v1/models/{id}: the official client's `models.retrieve`, one model as `/v1/models`
lists it, and a 404 in OpenAI's error shape for a model the mesh does not serve."""

from __future__ import annotations

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
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_the_openai_client_retrieves_a_model_as_the_list_shows_it(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    client = openai_client(http_mesh)
    model = await client.models.retrieve("flux-tiny")
    assert model.id == "flux-tiny" and model.object == "model" and model.owned_by == "mediamesh"
    async with httpx.AsyncClient(base_url=base_url(http_mesh), headers=bearer(KEY_A)) as http:
        listed = (await http.get("/v1/models")).json()["data"]
        one = (await http.get("/v1/models/flux-tiny")).json()
    assert one == next(m for m in listed if m["id"] == "flux-tiny")


async def test_an_unknown_model_is_a_404_naming_the_models_served(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await openai_client(http_mesh).models.retrieve("no-such-model")
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "model" and error["code"] == "NOT_FOUND"
    assert "'no-such-model' is not served" in error["message"] and "flux-tiny" in error["message"]
    with pytest.raises(openai.AuthenticationError):
        await openai_client(http_mesh, key="not-a-key").models.retrieve("flux-tiny")
