"""Output formats through gateway -> scheduler -> worker: chosen per request, decoded for real."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as pb_grpc
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.gateway.core.tensors import join_bytes_tensor, split_bytes_tensor
from tests.media import decode_audio, decode_image, decode_video
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh


@pytest.fixture
async def media_mesh(tmp_path: Path, models_dir: Path) -> AsyncIterator[InProcessMesh]:
    mesh = await start_mesh(tmp_path, models_dir, [["flux-tiny", "wan-tiny", "stable-audio-tiny"]])
    yield mesh
    await stop_mesh(mesh)


async def _result(mesh: InProcessMesh, request: common_pb2.GenerateRequest) -> common_pb2.Result:
    events = [event async for event in mesh.gateway_stub().Generate(request)]
    assert events[-1].HasField("result"), events[-1]
    return events[-1].result


async def test_each_modality_returns_the_requested_format_decodable(
    media_mesh: InProcessMesh,
) -> None:
    image = await _result(
        media_mesh,
        common_pb2.GenerateRequest(
            model="flux-tiny",
            prompt="fox",
            steps=2,
            width=64,
            height=48,
            seed=1,
            output_format="webp",
            output_quality=70,
        ),
    )
    assert image.mime_type == "image/webp"
    picture = decode_image(image.data)
    assert picture.format == "WEBP" and picture.size == (64, 48)

    clip = await _result(
        media_mesh,
        common_pb2.GenerateRequest(
            model="wan-tiny",
            prompt="fox",
            steps=2,
            num_frames=5,
            seed=2,
            output_format="webm",
            fps=10,
        ),
    )
    assert clip.mime_type == "video/webm"
    video = decode_video(clip.data)
    assert video.codec == "vp9" and video.frames.shape[0] == 5
    assert video.rate is not None and float(video.rate) == pytest.approx(10, abs=0.5)

    sound = await _result(
        media_mesh,
        common_pb2.GenerateRequest(
            model="stable-audio-tiny",
            prompt="fox",
            steps=2,
            duration_s=1.0,
            seed=3,
            output_format="flac",
        ),
    )
    assert sound.mime_type == "audio/flac"
    samples, rate, kind = decode_audio(sound.data)
    assert kind.startswith("FLAC/") and rate == 4000
    assert samples.shape[0] == pytest.approx(rate * 1.0, abs=rate * 0.01)


async def test_a_request_without_a_format_gets_the_model_default(media_mesh: InProcessMesh) -> None:
    image = await _result(
        media_mesh, common_pb2.GenerateRequest(model="flux-tiny", prompt="fox", steps=1)
    )
    assert image.mime_type == "image/png" and decode_image(image.data).format == "PNG"


async def test_a_video_format_on_an_image_model_is_refused_at_the_gateway(
    media_mesh: InProcessMesh,
) -> None:
    stub = media_mesh.gateway_stub()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Submit(
            common_pb2.GenerateRequest(model="flux-tiny", prompt="fox", output_format="mp4")
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = caught.value.details() or ""
    assert details.startswith("output_format: 'mp4' is not available")
    assert "png, jpeg, webp" in details


async def test_list_models_reports_each_models_formats(media_mesh: InProcessMesh) -> None:
    listed = await media_mesh.gateway_stub().ListModels(gateway_pb2.ListModelsRequest())
    formats = {model.name: list(model.output_formats) for model in listed.models}
    assert formats["flux-tiny"] == ["png", "jpeg", "webp"]
    assert formats["wan-tiny"] == ["mp4", "webm", "gif"]
    assert formats["stable-audio-tiny"] == ["wav", "flac", "ogg", "mp3", "opus", "aac"]


async def test_kserve_takes_output_format_as_a_parameter(media_mesh: InProcessMesh) -> None:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{media_mesh.gateway.port}")
    media_mesh.channels.append(channel)
    request = pb.ModelInferRequest(model_name="flux-tiny", id="fmt")
    request.inputs.add(name="prompt", datatype="BYTES", shape=[2])
    request.raw_input_contents.append(join_bytes_tensor([b"fox", b"owl"]))
    request.parameters["output_format"].string_param = "jpeg"
    request.parameters["steps"].int64_param = 1
    response = await pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    output = next(i for i, o in enumerate(response.outputs) if o.name == "output")
    assert response.outputs[output].parameters["content_type"].string_param == "image/jpeg"
    for element in split_bytes_tensor(response.raw_output_contents[output], "output"):
        assert decode_image(element).format == "JPEG"
