"""Image inputs through `mediamesh up`: img2img, inpainting and image-to-video from the CLI,
an upload used by id, and an img2img job preempted mid-run that finishes with its inputs.

One mesh for the module: a spot worker and an on-demand worker, each hosting the four
image-input models. The preemption test stops the spot worker, so it runs last.
"""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from PIL import Image

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from tests.e2e.conftest import MeshProcess, mesh_config, start, stop
from tests.e2e.test_spot import PLACEMENT, Follower
from tests.input_media import mask_bytes

pytestmark = pytest.mark.e2e

MODELS = ["sdxl-img2img-tiny", "sdxl-inpaint-tiny", "flux-img2img-tiny", "cogvideox-i2v-tiny"]


def noise_png(path: Path, size: tuple[int, int] = (64, 64), seed: int = 0) -> Path:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, "PNG")
    return path


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Iterator[MeshProcess]:
    tmp = tmp_path_factory.mktemp("image-inputs")
    scheduler = {**PLACEMENT, "inline_input_bytes": 1024}
    config = mesh_config(
        tmp,
        models_dir,
        [{"models": MODELS, "pool": "spot"}, {"models": MODELS, "pool": "on-demand"}],
        scheduler=scheduler,
    )
    process = start(tmp, config, ("--no-restart",))
    yield process
    stop(process)


def generate(mesh: MeshProcess, out: Path, *args: str) -> Path:
    done = mesh.cli("generate", "--gateway", mesh.gateway, "--quiet", "--out", str(out), *args)
    assert done.returncode == 0, done.stderr + done.stdout
    # The last line names the file; notices (dispatched, ...) come before it.
    written = Path(done.stdout.strip().splitlines()[-1].split(" ", 1)[0])
    assert written.is_file(), done.stdout
    return written


def test_cli_img2img_inpaint_and_image_to_video(mesh: MeshProcess, tmp_path: Path) -> None:
    image = noise_png(tmp_path / "in.png")
    (tmp_path / "mask.png").write_bytes(mask_bytes())
    common = ("--prompt", "a red fox", "--seed", "4", "--image", str(image))

    edited = generate(
        mesh, tmp_path / "o.png", "--model", "sdxl-img2img-tiny", *common, "--strength", "0.6"
    )
    assert Image.open(edited).size == (64, 64)
    flux = generate(mesh, tmp_path / "f.png", "--model", "flux-img2img-tiny", *common)
    assert Image.open(flux).size == (64, 64)
    painted = generate(
        mesh,
        tmp_path / "p.png",
        "--model",
        "sdxl-inpaint-tiny",
        *common,
        "--mask",
        str(tmp_path / "mask.png"),
    )
    assert Image.open(painted).size == (64, 64)
    video = generate(mesh, tmp_path / "v.mp4", "--model", "cogvideox-i2v-tiny", *common)
    assert video.suffix == ".mp4" and video.stat().st_size > 0

    # Forced through the Upload rpc: the same request by input_id gives the same picture.
    uploaded = generate(
        mesh,
        tmp_path / "u.png",
        "--model",
        "sdxl-img2img-tiny",
        *common,
        "--strength",
        "0.6",
        "--upload-above",
        "100",
    )
    assert uploaded.read_bytes() == edited.read_bytes()
    uploads = Path(mesh.config["scheduler"]["artifact_dir"]) / "uploads"
    assert any(p.suffix == ".bin" for p in uploads.iterdir())

    refused = mesh.cli(
        "generate", "--gateway", mesh.gateway, "--quiet", "--out", str(tmp_path / "x.png"),
        "--model", "sdxl-img2img-tiny", *common, "--strength", "1.5",
    )  # fmt: skip
    assert refused.returncode == 1
    assert "strength: 1.5 is out of range; allowed 0 < strength <= 1" in refused.stderr


def test_preempted_img2img_job_restarts_with_its_inputs(mesh: MeshProcess, tmp_path: Path) -> None:
    image = noise_png(tmp_path / "in.png", seed=9).read_bytes()
    request = {"model": "flux-img2img-tiny", "prompt": "a fox", "seed": 21, "steps": 50}
    options = [("grpc.max_receive_message_length", 1 << 26)]
    with grpc.insecure_channel(mesh.gateway, options=options) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        plain = list(stub.Generate(common_pb2.GenerateRequest(image=image, **request), timeout=300))
        assert plain[-1].state == common_pb2.SUCCEEDED, plain[-1]

        spot_worker = mesh.child_pid("--worker-id worker-0")
        job_id = stub.Submit(
            common_pb2.GenerateRequest(image=image, priority=common_pb2.BATCH, **request)
        ).job_id
        follower = Follower(stub, job_id, at_step=(3, lambda: os.kill(spot_worker, signal.SIGTERM)))
        assert follower.done.wait(240)
        assert stub.GetJob(gateway_pb2.GetJobRequest(job_id=job_id)).worker_id == "worker-1"
    final = follower.events[-1]
    assert final.state == common_pb2.SUCCEEDED, final
    notices = follower.notices()
    assert "preempted" in notices and "restarted" in notices, notices
    # Strength trims the schedule to its last 30 steps; the restart runs all 30 again.
    assert follower.steps()[-1] == 30 and follower.steps().count(1) == 2
    assert final.result.data == plain[-1].result.data
    assert Image.open(io.BytesIO(final.result.data)).size == (64, 64)
