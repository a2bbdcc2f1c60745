"""A guidance-distilled UNet (LCM-style: `time_cond_proj_dim` set) makes its pipeline skip
classifier-free guidance at any scale, so a negative prompt would be dropped: the worker
refuses that job by name and still runs the rest of its batch."""

from __future__ import annotations

from pathlib import Path

from diffusers import UNet2DConditionModel
from wm_helpers import job_for, of, run

from mediamesh.common.errors import StatusCode
from mediamesh.common.registry import load_registry
from mediamesh.common.work import JobFailed, JobFinished
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.tiny_image_families import build_sdxl


def test_a_negative_prompt_on_a_guidance_distilled_unet_is_refused(tmp_path: Path) -> None:
    spec = load_registry().get("sdxl-tiny")
    assert spec is not None and spec.negative_prompt_needs_cfg
    pipeline = build_sdxl()
    # The config without its bookkeeping keys, which would restore the default.
    config = {k: v for k, v in pipeline.unet.config.items() if not k.startswith("_")}
    distilled = UNet2DConditionModel.from_config({**config, "time_cond_proj_dim": 8})
    pipeline.register_modules(unet=distilled.eval())
    pipeline.save_pretrained(tmp_path / "models" / spec.name)
    host = load_host(
        spec, models_dir=tmp_path / "models", device="cpu", checkpoint_dir=tmp_path / "ckpt"
    )
    try:
        plain = job_for(spec, "plain", steps=2, guidance_scale=5.0)
        negative = job_for(spec, "negative", steps=2, guidance_scale=5.0, negative_prompt="blur")
        events = run(host, [plain, negative])
        [failed] = of(events, "negative", JobFailed)
        assert failed.code == StatusCode.INVALID_ARGUMENT
        assert failed.message.startswith("negative_prompt: sdxl-tiny's UNet is guidance-distilled")
        assert len(of(events, "plain", JobFinished)) == 1
    finally:
        host.close()


def test_the_shipped_sdxl_still_takes_a_negative_prompt(host_for, registry_spec) -> None:
    spec = registry_spec("sdxl-tiny")
    job = job_for(spec, "negative", steps=2, guidance_scale=5.0, negative_prompt="blur")
    events = run(host_for("sdxl-tiny"), [job])
    assert len(of(events, "negative", JobFinished)) == 1
