"""A request of more jobs than its tenant's burst is refused at once, for good and whole, on
the OpenAI images routes and on the KServe API: it could never be admitted, so it makes no
job, costs nothing and asks for no retry."""

from __future__ import annotations

import grpc
import httpx
import pytest

from mediamesh.common.errors import RETRY_AFTER_KEY
from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as pb_grpc
from mediamesh.gateway.core.tensors import join_bytes_tensor
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import auth
from tests.service.gateway.http_support import (
    KEY_SLOW,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
    png_bytes,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_more_images_than_the_burst_are_refused_for_good_and_cost_nothing(
    http_mesh: InProcessMesh,  # noqa: F811
    client: httpx.AsyncClient,
) -> None:
    # Tenant "slow" may submit one job, then one per 100 s.
    before = len(http_mesh.core.jobs)
    body = {"model": "echo", "prompt": "quota", "n": 10}
    refused = await client.post("/v1/images/generations", json=body, headers=bearer(KEY_SLOW))
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["param"] == "n" and error["code"] == "RESOURCE_EXHAUSTED", error
    assert "10 jobs" in error["message"] and "burst of 1" in error["message"], error
    # No wait lifts it, and the openai client is told not to retry.
    assert "retry-after" not in refused.headers
    assert refused.headers["x-should-retry"] == "false"
    edit = await client.post(
        "/v1/images/edits",
        data={"model": "flux-img2img-tiny", "prompt": "x", "n": "2"},
        files={"image": ("in.png", png_bytes(), "image/png")},
        headers=bearer(KEY_SLOW),
    )
    assert edit.status_code == 429 and edit.json()["error"]["param"] == "n", edit.text
    assert len(http_mesh.core.jobs) == before
    # Neither was charged: the tenant's one token is still there.
    one = await client.post(
        "/v1/jobs", json={"model": "echo", "prompt": "one"}, headers=bearer(KEY_SLOW)
    )
    assert one.status_code == 202, one.text


async def test_a_kserve_call_of_more_prompts_than_the_burst_is_refused_without_a_retry_hint(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{http_mesh.gateway.port}")
    http_mesh.channels.append(channel)
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="prompt", datatype="BYTES", shape=[2])
    request.raw_input_contents.append(join_bytes_tensor([b"x", b"y"]))
    before = len(http_mesh.core.jobs)
    infer = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await infer(request, metadata=auth(KEY_SLOW), timeout=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.details().startswith("inputs.prompt: ")
    assert "2 jobs" in caught.value.details() and "burst of 1" in caught.value.details()
    assert RETRY_AFTER_KEY not in dict(caught.value.trailing_metadata() or ())
    assert len(http_mesh.core.jobs) == before
