"""Jobs the gateway refuses itself, before the scheduler sees them, are counted by reason:
the scheduler's refusal counter never hears of them."""

from __future__ import annotations

import grpc
import httpx
import pytest
from prometheus_client import REGISTRY

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.common.limits import MAX_PROMPT_CHARS
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A, KEY_B, auth
from tests.service.gateway.http_support import (
    base_url,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


def refused(queue: str, reason: str) -> float:
    labels = {"queue": queue, "reason": reason}
    return REGISTRY.get_sample_value("mediamesh_gateway_jobs_refused_total", labels) or 0.0


async def test_each_refusal_the_gateway_makes_is_counted_by_reason(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    cases = [
        (KEY_A, {"model": "flux-tiny", "prompt": "x", "width": 100}, "image", "invalid_request"),
        (KEY_A, {"model": "nope", "prompt": "x"}, "unknown", "unknown_model"),
        # NOT_FOUND too, but of an adapter the known model does not offer: a bad request.
        (
            KEY_A,
            {"model": "flux-tiny", "prompt": "x", "adapters": [{"name": "zzz"}]},
            "image",
            "invalid_request",
        ),
        # Tenant b may use echo alone.
        (KEY_B, {"model": "flux-tiny", "prompt": "x"}, "image", "tenant_policy"),
    ]
    scheduler_before = REGISTRY.get_sample_value(
        "mediamesh_jobs_refused_total", {"queue": "image", "reason": "invalid_request"}
    )
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        for key, body, queue, reason in cases:
            before = refused(queue, reason)
            answer = await http.post("/v1/jobs", headers=bearer(key), json=body)
            assert answer.status_code in (400, 403, 404), answer.text
            assert refused(queue, reason) == before + 1, (body, reason)
    # Counted once, where it was refused.
    assert (
        REGISTRY.get_sample_value(
            "mediamesh_jobs_refused_total", {"queue": "image", "reason": "invalid_request"}
        )
        == scheduler_before
    )


async def test_the_openai_and_kserve_faces_count_their_refusals_per_job(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    # Tenant b may use echo alone: each face refuses its flux-tiny jobs before any is made.
    kserve_body = {
        "inputs": [{"name": "prompt", "shape": [2], "datatype": "BYTES", "data": ["x", "y"]}],
        "outputs": [{"name": "seed"}],
    }
    requests = [
        ("/v1/images/generations", {"model": "flux-tiny", "prompt": "x", "n": 3}, 3),
        ("/v2/models/flux-tiny/infer", kserve_body, 2),
    ]
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        for path, body, jobs in requests:
            before = refused("image", "tenant_policy")
            answer = await http.post(path, headers=bearer(KEY_B), json=body)
            assert answer.status_code == 403, answer.text
            assert refused("image", "tenant_policy") == before + jobs, path


async def test_bodies_refused_while_read_are_counted_on_every_http_face(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    bad_dtype = {
        "inputs": [{"name": "prompt", "shape": [1], "datatype": "FP32", "data": [1.0]}],
    }
    cases = [
        # A value the JSON parser refuses: the model is read from the body all the same.
        ("/v1/jobs", {"json": {"model": "flux-tiny", "prompt": "x", "priority": "URGENT"}}, 1),
        ("/v1/jobs", {"data": {"model": "flux-tiny", "prompt": "x", "steps": "many"}}, 1),
        ("/v1/images/generations", {"json": {"prompt": "x", "n": 2, "size": "huge"}}, 2),
        ("/v2/models/flux-tiny/infer", {"json": bad_dtype}, 1),
    ]
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        for path, body, jobs in cases:
            before = refused("image", "invalid_request")
            answer = await http.post(path, headers=bearer(KEY_A), **body)
            assert answer.status_code == 400, answer.text
            assert refused("image", "invalid_request") == before + jobs, (path, body)
        # A body that is no JSON names no model: counted under the unknown queue.
        before = refused("unknown", "invalid_request")
        answer = await http.post(
            "/v1/jobs",
            headers={**bearer(KEY_A), "content-type": "application/json"},
            content=b"{",
        )
        assert answer.status_code == 400, answer.text
        assert refused("unknown", "invalid_request") == before + 1


async def test_a_grpc_request_past_a_limit_is_counted_once(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    stub = http_mesh.gateway_stub()
    too_long = common_pb2.GenerateRequest(
        model="flux-tiny", prompt="x" * (4 * MAX_PROMPT_CHARS + 1)
    )
    before = refused("image", "invalid_request")
    with pytest.raises(grpc.aio.AioRpcError) as refusal:
        await stub.Submit(too_long, metadata=auth(KEY_A), timeout=30)
    assert refusal.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert refused("image", "invalid_request") == before + 1
    # The DataPlane's own refusals are not counted a second time by the lenient guard.
    before = refused("image", "invalid_request")
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.Submit(
            common_pb2.GenerateRequest(model="flux-tiny", prompt="x", width=100),
            metadata=auth(KEY_A),
            timeout=30,
        )
    assert refused("image", "invalid_request") == before + 1
