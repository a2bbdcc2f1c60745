"""preview_every_steps is held to the steps a job runs, which strength shortens."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from mediamesh.common.denoising_steps import FRACTIONAL_START, denoising_steps
from mediamesh.common.errors import InvalidArgument
from mediamesh.common.params import RequestFields, check_generation, resolve
from mediamesh.common.pipeline_fields import _diffusers_root
from mediamesh.common.registry import ModelSpec, load_registry
from tests.input_media import image_bytes, mask_bytes

REGISTRY = load_registry()


def spec(name: str) -> ModelSpec:
    found = REGISTRY.get(name)
    assert found is not None
    return found


def img2img(name: str, **fields: object) -> RequestFields:
    extra: dict[str, object] = {"image": image_bytes()}
    if "mask_image" in spec(name).inputs:
        extra["mask_image"] = mask_bytes()
    return RequestFields(name, "a fox", **extra, **fields)  # type: ignore[arg-type]


def refusal(name: str, **fields: object) -> str:
    with pytest.raises(InvalidArgument) as caught:
        resolve(spec(name), img2img(name, **fields))
    return caught.value.message


def test_sdxl_img2img_runs_int_steps_times_strength() -> None:
    # 4 steps at the entry's 0.6 run 2 (diffusers: int(4 * 0.6)); an interval of 3 or 4
    # would never send a preview.
    assert spec("sdxl-img2img-tiny").defaults.strength == 0.6
    for every in (3, 4):
        assert refusal("sdxl-img2img-tiny", steps=4, preview_every_steps=every) == (
            f"preview_every_steps: {every} is out of range; allowed 0..2 (this job runs 2 "
            "denoising steps: 4 steps at strength 0.6)"
        )
    kept = resolve(spec("sdxl-img2img-tiny"), img2img("sdxl-img2img-tiny", preview_every_steps=2))
    assert kept.preview_every_steps == 2
    full = img2img("sdxl-img2img-tiny", strength=1.0, preview_every_steps=4)
    assert resolve(spec("sdxl-img2img-tiny"), full).preview_every_steps == 4


def test_flux_img2img_runs_the_fractional_tail() -> None:
    # Flux starts int(4 - 2.4) = 1 step in: it runs 3 of 4 steps at 0.6, as progress counts.
    assert denoising_steps("FluxImg2ImgPipeline", 4, 0.6) == 3
    ok = resolve(spec("flux-img2img-tiny"), img2img("flux-img2img-tiny", preview_every_steps=3))
    assert ok.preview_every_steps == 3
    message = refusal("flux-img2img-tiny", steps=4, preview_every_steps=4)
    assert message.startswith("preview_every_steps: 4 is out of range; allowed 0..3 (this job")


def test_an_inpainting_job_and_one_named_by_upload_id_are_held_alike() -> None:
    message = refusal("sdxl-inpaint-tiny", steps=10, strength=0.5, preview_every_steps=6)
    assert "allowed 0..5 (this job runs 5 denoising steps: 10 steps at strength 0.5)" in message
    # The gateway sees only the id, not the bytes; the strength is known all the same.
    by_id = RequestFields("sdxl-img2img-tiny", "a fox", image_id="u1", preview_every_steps=3)
    with pytest.raises(InvalidArgument, match=r"^preview_every_steps: 3 .* allowed 0\.\.2 "):
        resolve(spec("sdxl-img2img-tiny"), by_id)


def test_a_worker_checks_the_steps_run_as_well() -> None:
    model = spec("sdxl-img2img-tiny")
    params = resolve(model, img2img("sdxl-img2img-tiny", preview_every_steps=2))
    with pytest.raises(InvalidArgument, match=r"^preview_every_steps: 3 .* allowed 0\.\.2"):
        check_generation(model, replace(params, preview_every_steps=3))


def test_without_an_image_the_steps_are_the_bound() -> None:
    assert denoising_steps("StableDiffusionXLImg2ImgPipeline", 4, 0.0) == 4
    assert denoising_steps("StableDiffusionXLImg2ImgPipeline", 4, 1.0) == 4
    flux = resolve(spec("flux-tiny"), RequestFields("flux-tiny", "x", preview_every_steps=4))
    assert flux.preview_every_steps == 4


def test_the_fractional_table_matches_diffusers() -> None:
    root = _diffusers_root()
    # A project dependency: without it the table could not be checked, and must not pass.
    assert root is not None, "diffusers is not installed"
    fractional = set()
    for path in (root / "pipelines").rglob("pipeline_*.py"):
        source = path.read_text(encoding="utf-8")
        if "init_timestep = min(num_inference_steps * strength" in source:
            fractional |= set(re.findall(r"^class (\w+Pipeline)\(", source, re.MULTILINE))
    assert fractional == FRACTIONAL_START
