"""The Open Inference Protocol on the gateway: tritonclient unmodified, and hand-built calls."""

from __future__ import annotations

import asyncio
import hashlib
import io
from pathlib import Path

import grpc
import pytest
from PIL import Image

from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as pb_grpc
from mediamesh.common.registry import load_registry
from mediamesh.gateway.core.tensors import join_bytes_tensor, split_bytes_tensor, unpack_int64
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, NO_SPOT_WAIT, auth, keyed, run_probe


def stub_for(mesh) -> pb_grpc.GRPCInferenceServiceStub:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.gateway.port}")
    mesh.channels.append(channel)
    return pb_grpc.GRPCInferenceServiceStub(channel)


def prompt_request(
    model: str, *texts: bytes, raw: bool = True, **params: int
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, id="req-1")
    tensor = request.inputs.add(name="prompt", datatype="BYTES", shape=[len(texts)])
    if raw:
        request.raw_input_contents.append(join_bytes_tensor(texts))
    else:
        tensor.contents.bytes_contents.extend(texts)
    for name, value in params.items():
        request.parameters[name].int64_param = value
    return request


async def test_tritonclient_health_metadata_infer_stream_and_errors(keyed_mesh):
    report = await run_probe(
        f"127.0.0.1:{keyed_mesh.gateway.port}",
        "health",
        "infer",
        "stream",
        "errors",
        "echo",
        "repository",
        "statistics",
        "--api-key",
        KEY_A,
    )
    health = report["health"]
    assert health["live"] and health["ready"] and health["echo_ready"]
    assert not health["unknown_ready"]
    assert health["server"]["name"] == "mediamesh"
    assert "schedule_policy" in health["server"]["extensions"]
    assert "model_configuration" in health["server"]["extensions"]
    # flux-tiny takes no negative prompt, so its metadata lists none.
    assert health["inputs"] == [["prompt", "BYTES", [-1]]]
    # flux-tiny has previews, but the metadata lists only outputs a request may ask for:
    # `preview` comes unasked on ModelStreamInfer's progress responses.
    assert health["outputs"] == [["output", "BYTES", [-1]], ["seed", "INT64", [-1]]]

    infer = report["infer"]
    assert infer["sizes"] == [[48, 32]] * 3 and infer["seeds"] == [7, 8, 9]
    assert infer["content_type"] == "image/png" and infer["shape"] == [3]

    stream = report["stream"]
    for element in (0, 1):
        steps = [(step, total) for e, step, total in stream["progress"] if e == element]
        assert steps == [(1, 3), (2, 3), (3, 3)]
    assert stream["final"] == {"id": "s1", "sizes": [[64, 64], [64, 64]]}
    # A bad request on a stream is answered in-band; the stream and its other requests go on.
    assert stream["errors"] == ["INVALID_ARGUMENT: steps: 99 is out of range; allowed 1..50"]

    errors = report["errors"]
    assert errors["unknown_model"]["status"] == "StatusCode.NOT_FOUND"
    assert errors["unknown_model"]["message"].startswith("Request for unknown model: 'nope'")
    assert errors["unknown_metadata"]["status"] == "StatusCode.NOT_FOUND"
    assert errors["bad_steps"]["status"] == "StatusCode.INVALID_ARGUMENT"
    assert "steps" in errors["bad_steps"]["message"]
    assert errors["too_many"]["status"] == "StatusCode.INVALID_ARGUMENT"
    assert "limit for model 'flux-tiny' is 4" in errors["too_many"]["message"]
    assert errors["no_key"]["status"] == "StatusCode.UNAUTHENTICATED"

    assert report["echo"] == {"sizes": [[16, 16]]}

    # tritonclient's JSON of the messages: proto3 leaves zeros and false out, int64 as text.
    repository = report["repository"]
    assert repository["config"] == {
        "name": "flux-tiny",
        "platform": "mediamesh_FluxPipeline",
        "backend": "diffusers",
        "input": [{"name": "prompt", "data_type": "TYPE_STRING", "dims": ["-1"]}],
        "output": [
            {"name": "output", "data_type": "TYPE_STRING", "dims": ["-1"]},
            {"name": "seed", "data_type": "TYPE_INT64", "dims": ["-1"]},
        ],
    }
    index = {model["name"]: model for model in repository["index"]}
    assert list(index) == sorted(load_registry().names)
    assert index["flux-tiny"] == {"name": "flux-tiny", "version": "1", "state": "READY"}
    assert index["wan-tiny"] == {
        "name": "wan-tiny",
        "version": "1",
        "state": "UNAVAILABLE",
        "reason": "no live worker hosts it",
    }
    assert repository["unknown"]["status"] == "StatusCode.NOT_FOUND"
    assert repository["unknown"]["message"].startswith("Request for unknown model: 'nope'")

    statistics = report["statistics"]
    assert "statistics" in health["server"]["extensions"]
    (echo,) = statistics["echo"]
    assert (echo["name"], echo["version"]) == ("echo", "1")
    # The echo scenario's job and the statistics scenario's own, uint64s as JSON text.
    assert echo["inference_count"] == "2" and echo["inference_stats"]["success"]["count"] == "2"
    assert statistics["every"] == list(load_registry().names)
    assert statistics["unknown"]["status"] == "StatusCode.NOT_FOUND"


async def test_raw_input_contents_request_built_by_hand(keyed_mesh):
    request = prompt_request("flux-tiny", b"a fox", b"a cat", seed=40, steps=2, width=32)
    request.outputs.add(name="output")
    response = await stub_for(keyed_mesh).ModelInfer(request, metadata=auth(KEY_A))
    assert (response.model_name, response.model_version, response.id) == ("flux-tiny", "1", "req-1")
    (output,) = response.outputs
    assert (output.name, output.datatype, list(output.shape)) == ("output", "BYTES", [2])
    assert output.parameters["content_type"].string_param == "image/png"
    images = split_bytes_tensor(response.raw_output_contents[0], "output")
    assert [Image.open(io.BytesIO(i)).size for i in images] == [(32, 64), (32, 64)]


async def test_a_prompt_batched_as_n_by_1_is_answered_as_n_by_1(keyed_mesh):
    request = prompt_request("flux-tiny", b"a fox", b"a cat", steps=1, width=32)
    request.inputs[0].shape[:] = [2, 1]
    response = await stub_for(keyed_mesh).ModelInfer(request, metadata=auth(KEY_A))
    assert {o.name: list(o.shape) for o in response.outputs} == {"output": [2, 1], "seed": [2, 1]}


async def test_typed_bytes_contents_with_a_shared_negative_prompt(tmp_path: Path, models_dir: Path):
    # sdxl-tiny, not echo: echo uses no negative prompt, so it refuses one.
    mesh = await start_mesh(
        tmp_path, models_dir, [["sdxl-tiny"]], gateway=keyed(), scheduler=NO_SPOT_WAIT
    )
    try:
        request = prompt_request("sdxl-tiny", b"one", b"two", raw=False, seed=3)
        negative = request.inputs.add(name="negative_prompt", datatype="BYTES", shape=[1])
        negative.contents.bytes_contents.append(b"blurry")
        request.parameters["priority"].string_param = "BATCH"
        response = await stub_for(mesh).ModelInfer(request, metadata=auth(KEY_A))
        names = [o.name for o in response.outputs]
        assert names == ["output", "seed"]
        assert unpack_int64(response.raw_output_contents[1]) == [3, 4]
        assert {j.priority.name for j in mesh.core.jobs.values()} == {"BATCH"}
        assert {j.params.negative_prompt for j in mesh.core.jobs.values()} == {"blurry"}
    finally:
        await stop_mesh(mesh)


def _malformed() -> list[tuple[str, pb.ModelInferRequest, str]]:
    cases = []
    truncated = prompt_request("echo", b"x")
    truncated.raw_input_contents[0] = b"\x09\x00\x00\x00abc"
    cases.append(("truncated raw", truncated, "declares 9 bytes but only 3 remain"))
    extra = prompt_request("echo", b"x")
    extra.raw_input_contents.append(b"")
    cases.append(("raw count", extra, "raw_input_contents: 2 entries for 1 inputs"))
    both = prompt_request("echo", b"x")
    both.inputs[0].contents.bytes_contents.append(b"x")
    cases.append(("both", both, "not both"))
    floats = pb.ModelInferRequest(model_name="echo")
    floats.inputs.add(name="prompt", datatype="BYTES", shape=[1]).contents.fp32_contents.append(1)
    cases.append(("typed floats", floats, "bytes_contents"))
    unknown = prompt_request("echo", b"x")
    unknown.parameters["stepz"].int64_param = 1
    cases.append(("unknown parameter", unknown, "unknown parameter 'stepz'"))
    empty = pb.ModelInferRequest(model_name="echo")
    empty.parameters["steps"].CopyFrom(pb.InferParameter())
    empty.inputs.add(name="prompt", datatype="BYTES", shape=[1]).contents.bytes_contents.append(
        b"x"
    )
    cases.append(("parameter without value", empty, "'steps' has no value"))
    return cases


@pytest.mark.parametrize(
    ("case", "request_", "words"), _malformed(), ids=[case for case, _, _ in _malformed()]
)
async def test_malformed_requests_are_invalid_argument_before_any_job(
    keyed_mesh, case, request_, words
):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub_for(keyed_mesh).ModelInfer(request_, metadata=auth(KEY_A))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in caught.value.details()
    assert not keyed_mesh.core.jobs


async def test_an_expired_timeout_is_unavailable_like_triton(tmp_path: Path, models_dir: Path):
    mesh = await start_mesh(tmp_path, models_dir, [])  # no worker: nothing can run
    try:
        request = prompt_request("echo", b"x")
        request.parameters["timeout"].int64_param = 300_000  # microseconds
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub_for(mesh).ModelInfer(request)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert caught.value.details().startswith("Request timeout expired")
        (job,) = mesh.core.jobs.values()
        assert job.state.value == "EXPIRED"
    finally:
        await stop_mesh(mesh)


async def test_a_timeout_no_run_could_meet_is_unavailable_at_once(keyed_mesh):
    request = prompt_request("echo", b"x")
    request.parameters["timeout"].int64_param = 1  # microseconds
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub_for(keyed_mesh).ModelInfer(request, metadata=auth(KEY_A))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert caught.value.details().startswith("Request timeout expired (timeout: 0.000 s left")
    assert not keyed_mesh.core.jobs


async def test_a_caller_that_leaves_cancels_its_jobs(tmp_path: Path, models_dir: Path):
    mesh = await start_mesh(tmp_path, models_dir, [])
    try:
        call = stub_for(mesh).ModelInfer(prompt_request("echo", b"x", b"y"))
        for _ in range(100):
            if len(mesh.core.jobs) == 2:
                break
            await asyncio.sleep(0.02)
        call.cancel()
        # Bounded generously: on a loaded 2-core machine the cancel can take seconds.
        for _ in range(1000):
            if all(j.state.value == "CANCELLED" for j in mesh.core.jobs.values()):
                break
            await asyncio.sleep(0.02)
        assert [j.state.value for j in mesh.core.jobs.values()] == ["CANCELLED"] * 2
    finally:
        await stop_mesh(mesh)


async def test_a_result_above_the_inline_limit_still_comes_back_whole(
    tmp_path: Path, models_dir: Path
):
    settings = {**keyed(), "inline_result_limit_bytes": 1024, "download_chunk_bytes": 1024}
    mesh = await start_mesh(tmp_path, models_dir, [["flux-tiny"]], gateway=settings)
    try:
        request = prompt_request("flux-tiny", b"a big fox", steps=1, seed=9)
        response = await stub_for(mesh).ModelInfer(request, metadata=auth(KEY_A))
        (png,) = split_bytes_tensor(response.raw_output_contents[0], "output")
        (stored,) = mesh.scheduler.runtime.results.values()
        assert len(png) == stored.size_bytes > 4 * 1024
        assert hashlib.sha256(png).hexdigest() == stored.sha256
    finally:
        await stop_mesh(mesh)


async def test_the_repository_index_filters_ready_models_and_knows_one_repository(keyed_mesh):
    stub = stub_for(keyed_mesh)
    ready = await stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True), metadata=auth(KEY_A))
    assert {(m.name, m.state) for m in ready.models} == {("echo", "READY"), ("flux-tiny", "READY")}
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await stub.RepositoryIndex(
            pb.RepositoryIndexRequest(repository_name="models"), metadata=auth(KEY_A)
        )
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
    assert unknown.value.details().startswith("repository_name: no repository 'models'")
    with pytest.raises(grpc.aio.AioRpcError) as no_key:
        await stub.ModelConfig(pb.ModelConfigRequest(name="flux-tiny"))
    assert no_key.value.code() is grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as version:
        await stub.ModelConfig(
            pb.ModelConfigRequest(name="flux-tiny", version="2"), metadata=auth(KEY_A)
        )
    assert version.value.code() is grpc.StatusCode.NOT_FOUND
