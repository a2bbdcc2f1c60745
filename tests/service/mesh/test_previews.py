"""Latent previews through gateway -> scheduler -> worker: in step order, decodable, refused
where the model has none; on the KServe stream; and counted by `mediamesh generate`."""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from PIL import Image

from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as pb_grpc
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.common.registry import Registry, load_registry
from mediamesh.gateway.core.tensors import join_bytes_tensor, split_bytes_tensor
from tests.conftest import ROOT
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh


def registry_with_echo_previews_off() -> Registry:
    """The shipped registry, except that echo's entry turns previews off."""
    models = []
    for spec in load_registry().models:
        if spec.name == "echo":
            off = spec.preview.model_copy(update={"enabled": False})
            spec = spec.model_copy(update={"preview": off})
        models.append(spec)
    return Registry(models=models)


@pytest.fixture
async def preview_mesh(tmp_path: Path, models_dir: Path) -> AsyncIterator[InProcessMesh]:
    mesh = await start_mesh(
        tmp_path,
        models_dir,
        [["sdxl-tiny", "flux-tiny", "echo"]],
        registry=registry_with_echo_previews_off(),
    )
    yield mesh
    await stop_mesh(mesh)


def picture(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


async def _events(
    mesh: InProcessMesh, request: common_pb2.GenerateRequest
) -> list[common_pb2.GenerateEvent]:
    return [event async for event in mesh.gateway_stub().Generate(request, timeout=120)]


async def test_previews_arrive_in_step_order_and_decode_as_images(
    preview_mesh: InProcessMesh,
) -> None:
    listed = await preview_mesh.gateway_stub().ListModels(gateway_pb2.ListModelsRequest())
    previews = {m.name: m.previews for m in listed.models}
    assert previews["sdxl-tiny"] and previews["flux-tiny"] and not previews["echo"]

    every_step = common_pb2.GenerateRequest(
        model="sdxl-tiny", prompt="a fox", steps=3, seed=1, preview_every_steps=1
    )
    events = await _events(preview_mesh, every_step)
    assert events[-1].HasField("result"), events[-1]
    progress = [e.progress for e in events if e.HasField("progress")]
    assert [p.step for p in progress] == [1, 2, 3]
    for p in progress:
        assert p.preview.mime_type == "image/webp"
        image = picture(p.preview.data)
        assert image.format == "WEBP" and image.size == (64, 64)

    # Every second step of four, on a family with packed latents, at a size above 256 px.
    sparse = common_pb2.GenerateRequest(
        model="flux-tiny", prompt="a fox", steps=4, seed=2, width=512, height=256,
        preview_every_steps=2,
    )  # fmt: skip
    progress = [e.progress for e in await _events(preview_mesh, sparse) if e.HasField("progress")]
    assert [(p.step, p.HasField("preview")) for p in progress] == [
        (1, False), (2, True), (3, False), (4, True)
    ]  # fmt: skip
    assert {picture(p.preview.data).size for p in progress if p.HasField("preview")} == {(256, 128)}

    plain = common_pb2.GenerateRequest(model="sdxl-tiny", prompt="a fox", steps=2, seed=3)
    assert not any(e.progress.HasField("preview") for e in await _events(preview_mesh, plain))


@pytest.mark.parametrize(
    ("model", "steps", "every", "words"),
    [("echo", 1, 1, "has no latent previews"), ("sdxl-tiny", 4, 5, "out of range")],
)
async def test_previews_the_model_cannot_give_are_refused_naming_the_field(
    preview_mesh: InProcessMesh, model: str, steps: int, every: int, words: str
) -> None:
    request = common_pb2.GenerateRequest(
        model=model, prompt="a fox", steps=steps, preview_every_steps=every
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _events(preview_mesh, request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = caught.value.details() or ""
    assert details.startswith("preview_every_steps:") and words in details
    assert not preview_mesh.core.jobs


async def test_kserve_stream_progress_responses_carry_the_preview_output(
    preview_mesh: InProcessMesh,
) -> None:
    request = pb.ModelInferRequest(model_name="flux-tiny", id="p1")
    request.inputs.add(name="prompt", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(join_bytes_tensor([b"a fox"]))
    for name, value in (("steps", 3), ("seed", 4), ("preview_every_steps", 1)):
        request.parameters[name].int64_param = value

    async def requests() -> AsyncIterator[pb.ModelInferRequest]:
        yield request

    channel = grpc.aio.insecure_channel(f"127.0.0.1:{preview_mesh.gateway.port}")
    preview_mesh.channels.append(channel)
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    responses = [r async for r in stub.ModelStreamInfer(requests(), timeout=120)]
    assert not any(r.error_message for r in responses), responses
    *steps, final = [r.infer_response for r in responses]
    assert final.parameters["triton_final_response"].bool_param
    assert [o.name for o in final.outputs] == ["output", "seed"]
    assert [s.parameters["step"].int64_param for s in steps] == [1, 2, 3]
    for response in steps:
        (output,) = response.outputs
        assert (output.name, output.datatype, list(output.shape)) == ("preview", "BYTES", [1])
        assert output.parameters["mime_type"].string_param == "image/webp"
        (data,) = split_bytes_tensor(response.raw_output_contents[0], "preview")
        assert picture(data).format == "WEBP"

    # Unary ModelInfer answers once: previews asked of it are refused, never dropped.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.ModelInfer(request, timeout=60)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "preview_every_steps" in (refused.value.details() or "")


async def test_generate_command_counts_previews_and_saves_the_result(
    preview_mesh: InProcessMesh, tmp_path: Path
) -> None:
    out, folder = tmp_path / "fox", tmp_path / "previews"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mediamesh.cli.main", "generate",
        "--gateway", f"127.0.0.1:{preview_mesh.gateway.port}",
        "--model", "sdxl-tiny", "--prompt", "a fox", "--steps", "3",
        "--output-format", "webp", "--preview-every-steps", "1",
        "--preview-dir", str(folder), "--out", str(out),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()
    text = stdout.decode()
    assert "previews: 3" in text, text
    assert "previews: 3" in stderr.decode()  # live, next to the progress bar
    assert picture((tmp_path / "fox.webp").read_bytes()).format == "WEBP"
    saved = sorted(p.name for p in folder.iterdir())
    assert saved == ["step-0001.webp", "step-0002.webp", "step-0003.webp"]
    assert all(picture(p.read_bytes()).format == "WEBP" for p in folder.iterdir())
