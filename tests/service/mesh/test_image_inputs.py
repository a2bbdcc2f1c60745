"""Image inputs through an in-process mesh: validation on gRPC and KServe, uploads with their
tenant, quota, checksum and expiry, inputs stored with the job, and batching by image size."""

from __future__ import annotations

import asyncio
import hashlib
import io
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from PIL import Image

from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as pb_grpc
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from mediamesh.common.input_refs import inline_bytes
from mediamesh.common.registry import BatchingSpec, Registry, load_registry
from mediamesh.gateway.core.tensors import join_bytes_tensor, split_bytes_tensor
from tests.input_media import image_bytes, mask_bytes, png_bomb, truncated_png
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, KEY_B, auth, keyed

IMG2IMG = "flux-img2img-tiny"
INPAINT = "sdxl-inpaint-tiny"
QUOTA = 200_000
INLINE = 4096


def noise_png(size: tuple[int, int] = (64, 64), seed: int = 0) -> bytes:
    """A PNG that does not compress (about 12 KB at 64x64): above the inline size here."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


def registry() -> Registry:
    # A long batching window, so that jobs submitted together share a batch when allowed.
    models = [
        spec.model_copy(update={"batching": BatchingSpec(max_batch=4, max_wait_ms=400)})
        if spec.name == IMG2IMG
        else spec
        for spec in load_registry().models
    ]
    return Registry(models=models)


@pytest.fixture
async def mesh(tmp_path: Path, models_dir: Path) -> AsyncIterator[InProcessMesh]:
    mesh = await start_mesh(
        tmp_path,
        models_dir,
        [[IMG2IMG, INPAINT]],
        gateway=keyed(),
        scheduler={"inline_input_bytes": INLINE, "upload_quota_bytes": QUOTA},
        registry=registry(),
    )
    yield mesh
    await stop_mesh(mesh)


def stub(mesh: InProcessMesh) -> gateway_pb2_grpc.GatewayStub:
    return mesh.gateway_stub()


async def generate(mesh: InProcessMesh, key: str = KEY_A, **fields: object) -> list:
    request = common_pb2.GenerateRequest(prompt="a red fox", seed=3, **fields)  # type: ignore[arg-type]
    return [e async for e in stub(mesh).Generate(request, metadata=auth(key), timeout=120)]


async def upload(
    mesh: InProcessMesh,
    data: bytes,
    key: str = KEY_A,
    sha256: str | None = None,
    mime_type: str = "image/png",
) -> gateway_pb2.UploadHandle:
    digest = sha256 or hashlib.sha256(data).hexdigest()
    pieces = [data[i : i + 5000] for i in range(0, len(data), 5000)]

    async def chunks() -> AsyncIterator[gateway_pb2.UploadChunk]:
        for index, piece in enumerate(pieces):
            first = {"sha256": digest, "mime_type": mime_type} if index == 0 else {}
            yield gateway_pb2.UploadChunk(data=piece, **first)

    return await stub(mesh).Upload(chunks(), metadata=auth(key), timeout=30)


async def refused(mesh: InProcessMesh, code: grpc.StatusCode, key: str = KEY_A, **fields) -> str:
    request = common_pb2.GenerateRequest(prompt="a red fox", **fields)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub(mesh).Submit(request, metadata=auth(key), timeout=30)
    assert caught.value.code() == code, caught.value.details()
    return caught.value.details() or ""


BAD_INPUTS = [
    (
        {"model": IMG2IMG, "image": b"\x89PNG not really"},
        "image: cannot be decoded as PNG, JPEG or WebP (not an image file)",
    ),
    ({"model": IMG2IMG, "image": image_bytes(kind="GIF", mode="P", color=1)}, "GIF images"),
    ({"model": IMG2IMG, "image": image_bytes((1024, 512))}, "the limit is 262144 pixels"),
    ({"model": IMG2IMG, "image": png_bomb()}, "more pixels than the limit of 262144"),
    ({"model": IMG2IMG, "image": truncated_png()}, "image: cannot be decoded"),
    ({"model": IMG2IMG, "image": image_bytes(), "strength": 1.5}, "strength: 1.5 is out of range"),
    ({"model": IMG2IMG}, "image: required by model 'flux-img2img-tiny'"),
    ({"model": "flux-tiny", "image": image_bytes()}, "image: model 'flux-tiny' (FluxPipeline)"),
    ({"model": "flux-tiny", "image_id": "up-1"}, "image_id: model 'flux-tiny' (FluxPipeline)"),
    ({"model": "flux-tiny", "strength": 0.5}, "strength: model 'flux-tiny'"),
    (
        {"model": INPAINT, "image": image_bytes(), "mask_image": mask_bytes((64, 32))},
        "mask_image: 64x32 px; it must be the size of image (64x64 px)",
    ),
]


@pytest.mark.parametrize(("fields", "words"), BAD_INPUTS)
async def test_bad_inputs_are_invalid_argument_naming_field_and_limit(mesh, fields, words):
    details = await refused(mesh, grpc.StatusCode.INVALID_ARGUMENT, **fields)
    assert words in details
    assert not mesh.core.jobs


async def test_img2img_inpaint_and_list_models(mesh):
    models = {
        m.name: m
        for m in (
            await stub(mesh).ListModels(gateway_pb2.ListModelsRequest(), metadata=auth(KEY_A))
        ).models
    }
    assert list(models[INPAINT].inputs) == ["image", "mask_image"]
    assert list(models[IMG2IMG].inputs) == ["image"] and models["flux-tiny"].inputs == []
    assert models[IMG2IMG].default_strength == pytest.approx(0.6)
    assert "strength" in models[IMG2IMG].accepted_fields

    red = await generate(mesh, model=IMG2IMG, image=image_bytes(color=(220, 20, 20)), steps=4)
    assert red[-1].state == common_pb2.SUCCEEDED, red[-1]
    # 4 steps at strength 0.6 run the last 3 of Flux's schedule.
    assert [e.progress.total_steps for e in red if e.HasField("progress")] == [3, 3, 3]
    blue = await generate(mesh, model=IMG2IMG, image=image_bytes(color=(20, 20, 220)), steps=4)
    assert blue[-1].result.data != red[-1].result.data  # the input shapes the result

    painted = await generate(mesh, model=INPAINT, image=noise_png(), mask_image=mask_bytes())
    assert painted[-1].state == common_pb2.SUCCEEDED, painted[-1]
    assert Image.open(io.BytesIO(painted[-1].result.data)).size == (64, 64)


async def test_large_inputs_live_in_the_artifact_store_until_their_job_ended(mesh):
    runtime = mesh.scheduler.runtime
    events = await generate(mesh, model=IMG2IMG, image=noise_png())
    assert events[-1].state == common_pb2.SUCCEEDED, events[-1]
    job, _ = await runtime.store.get(events[-1].job_id)
    stored = Path(job.params.image.ref)
    assert stored.parent == runtime.settings.artifact_dir / "inputs"
    assert stored.name.startswith(job.params.image.sha256)
    # Its end in the store, the job's input file and the one copy it linked to are gone.
    assert await runtime.writer.flush(5.0)
    assert not stored.exists()
    assert not list((stored.parent / "sha256").iterdir())
    small = await generate(mesh, model=IMG2IMG, image=image_bytes())
    kept, _ = await runtime.store.get(small[-1].job_id)
    assert inline_bytes(kept.params.image.ref) == image_bytes()
    # Ended, the job is held until retention without the bytes its row keeps, and reads
    # about it still work.
    held = runtime.core.jobs[small[-1].job_id]
    assert held.params.image.ref == "" and held.params.image.sha256 == kept.params.image.sha256
    info = await stub(mesh).GetJob(
        gateway_pb2.GetJobRequest(job_id=small[-1].job_id), metadata=auth(KEY_A)
    )
    assert info.state == common_pb2.SUCCEEDED and info.result.artifact.size_bytes > 0

    later = time.time() + 1
    await runtime.removal.purge(later)
    await asyncio.to_thread(
        runtime.inputs.tidy, [j.params for j in runtime.core.jobs.values()], later
    )
    assert not stored.exists()


async def test_upload_then_name_it_by_id(mesh):
    data = noise_png(seed=4)
    handle = await upload(mesh, data)
    assert handle.size_bytes == len(data) and handle.sha256 == hashlib.sha256(data).hexdigest()
    assert handle.expires_unix_ms > time.time() * 1000
    by_id = await generate(mesh, model=IMG2IMG, image_id=handle.input_id)
    inline = await generate(mesh, model=IMG2IMG, image=data)
    assert by_id[-1].state == common_pb2.SUCCEEDED, by_id[-1]
    assert by_id[-1].result.data == inline[-1].result.data

    details = await refused(
        mesh, grpc.StatusCode.NOT_FOUND, key=KEY_B, model=IMG2IMG, image_id=handle.input_id
    )
    assert details.startswith("image_id: no upload") and "not yours" in details
    details = await refused(mesh, grpc.StatusCode.NOT_FOUND, model=INPAINT, image=data,
                            mask_image_id="up-nope")  # fmt: skip
    assert details.startswith("mask_image_id: no upload 'up-nope'")
    details = await refused(
        mesh, grpc.StatusCode.INVALID_ARGUMENT, model=IMG2IMG, image=data, image_id=handle.input_id
    )
    assert "set image or image_id, not both" in details

    uploads = mesh.scheduler.runtime.inputs.uploads
    uploads._clock = lambda: time.time() + 7200
    await refused(mesh, grpc.StatusCode.NOT_FOUND, model=IMG2IMG, image_id=handle.input_id)
    assert await asyncio.to_thread(uploads.sweep) == [handle.input_id]
    assert not any(uploads.folder.iterdir())


async def test_an_upload_must_be_of_an_input_format_and_the_declared_one(mesh):
    data = noise_png(seed=8)
    for declared, words in [
        ("image/gif", "mime_type: 'image/gif' is not an input format; use one of image/png"),
        ("image/jpeg", "mime_type: image/jpeg does not match the bytes, which are image/png"),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await upload(mesh, data, mime_type=declared)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (caught.value.details() or "").startswith(words), caught.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await upload(mesh, b"GIF89a" + data[6:], mime_type="")
    assert caught.value.details() == "data: not a PNG, JPEG or WebP file"
    assert not list(mesh.scheduler.runtime.inputs.uploads.folder.glob("*.bin*"))
    assert (await upload(mesh, data, mime_type="")).input_id

    # An upload that starts as a PNG but is none is refused when a job names it.
    broken = await upload(mesh, data[:100] + b"\x00" * 100)
    details = await refused(
        mesh, grpc.StatusCode.INVALID_ARGUMENT, model=IMG2IMG, image_id=broken.input_id
    )
    assert details.startswith("image_id: cannot be decoded as PNG, JPEG or WebP (")
    assert " at 0x" not in details and "Error" not in details


async def test_upload_checksum_and_quota(mesh):
    data = noise_png(seed=5)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await upload(mesh, data, sha256="0" * 64)
    assert caught.value.code() == grpc.StatusCode.DATA_LOSS
    assert "sha256" in (caught.value.details() or "")

    while True:  # fill tenant a's quota; tenant b keeps its own
        try:
            await upload(mesh, data)
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "upload_quota_bytes" in (exc.details() or "")
            assert f"quota is {QUOTA} bytes" in (exc.details() or "")
            break
    assert (await upload(mesh, data, key=KEY_B)).input_id
    assert mesh.scheduler.runtime.inputs.uploads.usage("a") <= QUOTA


async def test_jobs_batch_only_with_the_same_input_size(mesh):
    requests = [
        common_pb2.GenerateRequest(model=IMG2IMG, prompt="a fox", seed=s, image=image_bytes(size))
        for s, size in ((1, (64, 64)), (2, (64, 64)), (3, (48, 48)))
    ]
    handles = await asyncio.gather(
        *(stub(mesh).Submit(r, metadata=auth(KEY_A), timeout=30) for r in requests)
    )
    for handle in handles:
        watch = stub(mesh).Watch(
            gateway_pb2.WatchRequest(job_id=handle.job_id), metadata=auth(KEY_A)
        )
        events = [e async for e in watch]
        assert events[-1].state == common_pb2.SUCCEEDED, events[-1]
    batches = [mesh.core.jobs[h.job_id].batch_id for h in handles]
    assert batches[0] == batches[1] and batches[2] != batches[0]


def infer(
    model: str,
    images: list[bytes] | None,
    prompts: int = 1,
    masks: list[bytes] | None = None,
    **params: float,
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="prompt", datatype="BYTES", shape=[prompts])
    request.raw_input_contents.append(join_bytes_tensor([b"a fox"] * prompts))
    for name, elements in (("image", images), ("mask_image", masks)):
        if elements is not None:
            request.inputs.add(name=name, datatype="BYTES", shape=[len(elements)])
            request.raw_input_contents.append(join_bytes_tensor(elements))
    for name, value in params.items():
        # The gateway takes integer parameters (seed, steps) only as int64_param.
        if isinstance(value, int):
            request.parameters[name].int64_param = value
        else:
            request.parameters[name].double_param = value
    return request


def left_half_mask(size: tuple[int, int] = (64, 64)) -> bytes:
    """A mask that repaints the left half only (white) and keeps the right half (black)."""
    mask = Image.new("L", size, 0)
    mask.paste(255, (0, 0, size[0] // 2, size[1]))
    buffer = io.BytesIO()
    mask.save(buffer, "PNG")
    return buffer.getvalue()


async def test_kserve_image_inputs(mesh):
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.gateway.port}")
    mesh.channels.append(channel)
    kserve = pb_grpc.GRPCInferenceServiceStub(channel)
    meta = await kserve.ModelMetadata(pb.ModelMetadataRequest(name=INPAINT), metadata=auth(KEY_A))
    assert [t.name for t in meta.inputs] == ["prompt", "negative_prompt", "image", "mask_image"]
    # The outputs a request may ask for; ModelStreamInfer's step previews are not one.
    assert [t.name for t in meta.outputs] == ["output", "seed"]

    reply = await kserve.ModelInfer(
        infer(IMG2IMG, [image_bytes(), image_bytes(color=(0, 0, 200))], prompts=2, strength=0.5),
        metadata=auth(KEY_A),
        timeout=120,
    )
    outputs = split_bytes_tensor(reply.raw_output_contents[0], "output")
    assert len(outputs) == 2 and outputs[0] != outputs[1]

    # Inpainting: the mask travels as its own BYTES input. The same job over gRPC gives the
    # same image, and another mask another one, so the mask reached the pipeline.
    source = noise_png(seed=7)

    async def inpaint(mask: bytes) -> list[bytes]:
        request = infer(INPAINT, [source], masks=[mask], seed=11)
        reply = await kserve.ModelInfer(request, metadata=auth(KEY_A), timeout=120)
        return split_bytes_tensor(reply.raw_output_contents[0], "output")

    whole, half = await inpaint(mask_bytes()), await inpaint(left_half_mask())
    assert len(whole) == 1 and len(half) == 1
    assert Image.open(io.BytesIO(whole[0])).size == (64, 64)
    same = common_pb2.GenerateRequest(
        model=INPAINT, prompt="a fox", seed=11, image=source, mask_image=mask_bytes()
    )
    over_grpc = [e async for e in stub(mesh).Generate(same, metadata=auth(KEY_A), timeout=120)]
    assert over_grpc[-1].state == common_pb2.SUCCEEDED, over_grpc[-1]
    assert whole[0] == over_grpc[-1].result.data
    assert half[0] != whole[0]

    bad = [
        (infer("flux-tiny", [image_bytes()]), "unexpected inference input 'image'"),
        (infer(IMG2IMG, [image_bytes()], prompts=2), "image: 1 elements; send one per prompt"),
        (infer(IMG2IMG, [b"garbage"]), "image: cannot be decoded"),
        (infer(IMG2IMG, [png_bomb()]), "more pixels than the limit of 262144"),
        (infer(IMG2IMG, [image_bytes()], strength=2.0), "strength: 2.0 is out of range"),
        (infer(IMG2IMG, None), "image: required"),
        (
            infer(INPAINT, [image_bytes()], masks=[mask_bytes((64, 32))]),
            "mask_image: 64x32 px; it must be the size of image (64x64 px)",
        ),
        (
            infer(INPAINT, [image_bytes()] * 2, prompts=2, masks=[mask_bytes()]),
            "mask_image: 1 elements; send one per prompt",
        ),
        (infer(IMG2IMG, [image_bytes()], masks=[mask_bytes()]), "unexpected inference input"),
    ]
    for request, words in bad:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await kserve.ModelInfer(request, metadata=auth(KEY_A), timeout=30)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, words
        assert words in (caught.value.details() or ""), caught.value.details()


async def test_sdk_upload_and_image_options(mesh, tmp_path):
    from mediamesh.sdk import AsyncClient, Result

    path = tmp_path / "in.png"
    path.write_bytes(noise_png(seed=6))
    async with AsyncClient(f"127.0.0.1:{mesh.gateway.port}", api_key=KEY_A) as client:
        handle = await client.upload(path)
        assert handle.size_bytes == path.stat().st_size
        models = {m.name: m for m in await client.list_models()}
        assert models[INPAINT].inputs == ("image", "mask_image")
        events = [
            e
            async for e in client.generate(
                IMG2IMG, "a fox", seed=2, image_id=handle.input_id, strength=0.5
            )
        ]
    assert isinstance(events[-1], Result), events[-1]
