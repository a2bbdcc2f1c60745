"""Latent previews: each family's latents become a small picture that Pillow decodes."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from diffusers import AutoencoderTiny, FluxPipeline
from diffusers.configuration_utils import FrozenDict
from PIL import Image

from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.common.work import JobParams, Preview, StepDone
from mediamesh.worker.core.batch import BatchControl
from mediamesh.worker.models.echo import EchoHost, seed_colour
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.models.previews import (
    FAMILY_FACTORS,
    LatentPreviewer,
    latent_previewer,
    principal_rgb,
)
from mediamesh.worker.models.progress import StepTracker, Terminals

REGISTRY = load_registry()


def spec_of(name: str, **changes: Any) -> ModelSpec:
    spec = REGISTRY.get(name)
    assert spec is not None
    return spec.model_copy(update=changes) if changes else spec


def job(width: int = 64, height: int = 64, every: int = 1, steps: int = 4) -> JobParams:
    generation = GenerationParams(
        "x", steps=steps, width=width, height=height, preview_every_steps=every
    )
    return JobParams("j", generation)


def decoded(preview: Preview) -> Image.Image:
    image = Image.open(io.BytesIO(preview.data))
    image.load()
    return image


class FluxLike:
    """What the previewer reads of a Flux pipeline: its unpacker and VAE scale factor."""

    _unpack_latents = staticmethod(FluxPipeline._unpack_latents)
    vae_scale_factor = 8


def test_sdxl_latents_use_the_published_factors_and_keep_the_result_shape() -> None:
    previewer = LatentPreviewer(spec_of("sdxl-tiny"), SimpleNamespace())
    latents = torch.zeros(2, 4, 8, 6)
    latents[1, 0] = 1.0  # the second job: channel 0 only
    preview = previewer(latents, 1, job(width=48, height=64))
    image = decoded(preview)
    assert preview.mime_type == "image/webp" and image.format == "WEBP"
    assert image.size == (48, 64)
    # Channel 0's row plus the bias, mapped from -1..1 to 0..255 (WebP is lossy: a margin).
    expected = (np.array([0.3651, 0.4232, 0.4341]) + [0.1084, -0.0175, -0.0011] + 1) / 2 * 255
    centre = np.asarray(image.convert("RGB"), dtype=float)[32, 24]
    assert np.abs(centre - expected).max() < 12, (centre, expected)


def test_flux_packed_latents_unpack_to_the_same_picture_as_the_unpacked_grid() -> None:
    previewer = LatentPreviewer(spec_of("flux-tiny"), FluxLike())
    grid = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    # Pack 2x2 patches as Flux does: (batch, tokens, channels * 4).
    packed = grid.view(1, 16, 4, 2, 4, 2).permute(0, 2, 4, 1, 3, 5).reshape(1, 16, 64)
    from_packed = previewer(packed, 0, job())
    from_grid = previewer(grid, 0, job())
    assert from_packed.data == from_grid.data
    assert decoded(from_packed).size == (64, 64)


# First rows and biases of the published 16-channel tables (ComfyUI comfy/latent_formats.py).
FIRST_ROWS = {
    "flux-tiny": ((-0.0346, 0.0244, 0.0681), (-0.0329, -0.0718, -0.0851)),
    "sd3-tiny": ((-0.0922, -0.0175, 0.0749), (0.2394, 0.2135, 0.1925)),
    "wan-tiny": ((-0.1299, -0.1692, 0.2932), (-0.1835, -0.0868, -0.3360)),
}


def projected(grid: torch.Tensor, factors: Any, bias: Any) -> np.ndarray:
    """The expected preview pixels: the linear map to -1..1, then to 0..255."""
    rgb = torch.einsum("chw,cr->hwr", grid[0], torch.tensor(factors)) + torch.tensor(bias)
    return ((rgb + 1) / 2).clamp(0, 1).mul(255).round().to(torch.uint8).numpy()


def as_latents(model: str, grid: torch.Tensor) -> torch.Tensor:
    """`grid` (1, 16, h, w) in the layout the family's pipeline steps: Flux packs 2x2 patches
    into tokens, Wan is (batch, channels, frames, h, w) (here three copies of the frame)."""
    if model == "flux-tiny":
        _, c, h, w = grid.shape
        patches = grid.view(1, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
        return patches.reshape(1, (h // 2) * (w // 2), c * 4)
    if model == "wan-tiny":
        return grid.unsqueeze(2).expand(-1, -1, 3, -1, -1).contiguous()
    return grid


@pytest.mark.parametrize("model", sorted(FIRST_ROWS))
def test_sixteen_channel_families_use_their_published_factors(model: str) -> None:
    spec = spec_of(model)
    factors, bias = FAMILY_FACTORS[spec.pipeline]
    assert len(factors) == 16
    assert (factors[0], bias) == FIRST_ROWS[model]
    previewer = LatentPreviewer(spec, FluxLike() if model == "flux-tiny" else SimpleNamespace())
    grid = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(3))
    # The grid the previewer projects, exactly: the einsum of the table plus its bias.
    assert np.array_equal(previewer._project(grid), projected(grid, factors, bias))
    # Through the whole preview, from the pipeline's own layout: one flat latent per
    # channel makes one colour (WebP is lossy: a margin), where the principal projection of
    # a flat latent would be black.
    flat = torch.randn(1, 16, 1, 1, generator=torch.Generator().manual_seed(4)).expand(1, 16, 8, 8)
    expected = projected(flat, factors, bias)[0, 0].astype(float)
    assert expected.max() > 40
    image = decoded(previewer(as_latents(model, flat.contiguous()), 0, job()))
    centre = np.asarray(image.convert("RGB"), dtype=float)[32, 32]
    assert np.abs(centre - expected).max() < 8, (centre, expected)


@pytest.mark.parametrize(
    ("base", "variant"),
    [
        ("flux-tiny", "FluxImg2ImgPipeline"),
        ("flux-tiny", "FluxInpaintPipeline"),
        ("flux-tiny", "FluxKontextPipeline"),
        ("sd3-tiny", "StableDiffusion3Img2ImgPipeline"),
        ("sd3-tiny", "StableDiffusion3InpaintPipeline"),
        ("wan-tiny", "WanImageToVideoPipeline"),
        ("wan-tiny", "WanVideoToVideoPipeline"),
        ("sdxl-tiny", "StableDiffusionXLImg2ImgPipeline"),
        ("sdxl-tiny", "StableDiffusionXLInpaintPipeline"),
    ],
)
def test_img2img_inpaint_and_i2v_pipelines_share_their_familys_factors(
    base: str, variant: str
) -> None:
    assert FAMILY_FACTORS[variant] == FAMILY_FACTORS[spec_of(base).pipeline]
    previewer = LatentPreviewer(spec_of(base, pipeline=variant), SimpleNamespace())
    assert previewer.factors is not None
    assert torch.equal(previewer.factors, torch.tensor(FAMILY_FACTORS[variant][0]))


@pytest.mark.parametrize(
    ("model", "latents"),
    [
        ("cogvideox-tiny", torch.randn(1, 3, 16, 6, 8)),  # no published table
        ("wan-tiny", torch.randn(1, 48, 3, 6, 8)),  # a 48-channel (Wan 2.2 TI2V) autoencoder
    ],
)
def test_families_without_fitting_factors_fall_back_to_the_principal_projection(
    model: str, latents: torch.Tensor
) -> None:
    previewer = LatentPreviewer(spec_of(model), SimpleNamespace())
    grid = previewer._image_grid(latents, 64, 48)
    expected = (principal_rgb(grid[0]).clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    assert np.array_equal(previewer._project(grid), expected)
    assert decoded(previewer(latents, 0, job(width=64, height=48))).size == (64, 48)


def test_packed_latents_without_an_unpacker_still_make_a_picture() -> None:
    previewer = LatentPreviewer(spec_of("flux-tiny"), SimpleNamespace())
    preview = previewer(torch.randn(1, 32, 64), 0, job(width=128, height=64))
    assert decoded(preview).size == (128, 64)


def test_large_results_get_previews_at_most_256_pixels_a_side() -> None:
    previewer = LatentPreviewer(spec_of("sd3-tiny"), SimpleNamespace())
    preview = previewer(torch.randn(1, 16, 128, 64), 0, job(width=512, height=1024))
    assert decoded(preview).size == (128, 256)


@pytest.mark.parametrize(("model", "frames_axis"), [("wan-tiny", 2), ("cogvideox-tiny", 1)])
def test_video_previews_show_the_middle_frame(model: str, frames_axis: int) -> None:
    previewer = LatentPreviewer(spec_of(model), SimpleNamespace())
    frames = torch.randn(5, 16, 4, 4, generator=torch.Generator().manual_seed(1))
    latents = frames.unsqueeze(0) if frames_axis == 1 else frames.permute(1, 0, 2, 3)[None]
    middle = previewer(frames[2:3], 0, job())
    assert previewer(latents, 0, job()).data == middle.data
    assert previewer(latents, 0, job()).data != previewer(frames[0:1], 0, job()).data


@pytest.mark.parametrize("shape", [(1, 64, 40), (1, 8, 40, 16)])
def test_audio_previews_are_small_png_heat_maps(shape: tuple[int, ...]) -> None:
    previewer = LatentPreviewer(spec_of("stable-audio-tiny"), SimpleNamespace())
    preview = previewer(torch.randn(*shape), 0, job(width=0, height=0))
    image = decoded(preview)
    assert preview.mime_type == "image/png" and image.format == "PNG"
    assert max(image.size) <= 256
    assert len(set(image.convert("RGB").getdata())) > 4  # not one flat colour


@pytest.mark.parametrize("channels", [1, 2, 7, 32])
def test_principal_projection_fills_three_channels_over_their_full_range(channels: int) -> None:
    values = torch.randn(channels, 6, 5, generator=torch.Generator().manual_seed(channels))
    rgb = principal_rgb(values)
    assert rgb.shape == (6, 5, 3)
    assert torch.allclose(rgb.amin(dim=(0, 1)), torch.zeros(3), atol=1e-5)
    if channels > 1:
        assert torch.allclose(rgb.amax(dim=(0, 1)), torch.ones(3), atol=1e-5)


def test_registry_factors_replace_the_generic_projection() -> None:
    red = ((1.0, -1.0, -1.0),) + ((0.0, 0.0, 0.0),) * 15
    spec = spec_of(
        "sd3-tiny", preview=spec_of("sd3-tiny").preview.model_copy(update={"rgb_factors": red})
    )
    previewer = LatentPreviewer(spec, SimpleNamespace())
    latents = torch.zeros(1, 16, 4, 4)
    latents[0, 0] = 1.0
    pixel = np.asarray(decoded(previewer(latents, 0, job())).convert("RGB"))[10, 10]
    assert pixel[0] > 230 and pixel[1] < 25 and pixel[2] < 25, pixel


def test_a_tiny_vae_named_by_the_registry_decodes_the_previews(tmp_path: Path) -> None:
    tiny = AutoencoderTiny(
        encoder_block_out_channels=(8, 8),
        decoder_block_out_channels=(8, 8),
        num_encoder_blocks=(1, 1),
        num_decoder_blocks=(1, 1),
        latent_channels=4,
    )
    tiny.save_pretrained(tmp_path / "taesd-tiny")
    base = spec_of("sdxl-tiny")
    preview_spec = base.preview.model_copy(update={"vae": "{models_dir}/taesd-tiny"})
    previewer = LatentPreviewer(base.model_copy(update={"preview": preview_spec}), None)
    previewer.load_tiny_vae(tmp_path, "cpu")
    assert previewer.tiny_vae is not None
    preview = previewer(torch.randn(1, 4, 8, 8), 0, job())
    assert decoded(preview).size == (64, 64)


def test_own_factors_are_checked_against_the_autoencoders_channels() -> None:
    wan = spec_of("wan-tiny")
    four_rows = wan.preview.model_copy(update={"rgb_factors": ((1.0, 0.0, 0.0),) * 4})
    own = wan.model_copy(update={"preview": four_rows})
    # Wan's autoencoder calls its latent channels z_dim.
    wan_like = SimpleNamespace(vae=SimpleNamespace(config=FrozenDict(z_dim=16)))
    with pytest.raises(ModelLoadError, match=r"'wan-tiny' field preview.rgb_factors: 4 rows.* 16 "):
        LatentPreviewer(own, wan_like)
    matching = SimpleNamespace(vae=SimpleNamespace(config=FrozenDict(latent_channels=4)))
    assert LatentPreviewer(own, matching).factors is not None


def test_a_preview_autoencoder_hub_id_not_in_the_cache_names_the_field(tmp_path: Path) -> None:
    base = spec_of("sdxl-tiny")
    preview = base.preview.model_copy(update={"vae": "nobody/taesd-nowhere"})
    previewer = LatentPreviewer(base.model_copy(update={"preview": preview}), None)
    with pytest.raises(ModelLoadError) as caught:
        previewer.load_tiny_vae(tmp_path, "cpu")
    message = str(caught.value)
    assert message.startswith(
        "model 'sdxl-tiny' field preview.vae: nobody/taesd-nowhere is not in the Hugging Face cache"
    )
    assert "\n" not in message


def test_models_with_previews_off_get_no_previewer() -> None:
    base = spec_of("flux-tiny")
    off = base.model_copy(update={"preview": base.preview.model_copy(update={"enabled": False})})
    assert latent_previewer(off, None) is None
    assert latent_previewer(base, None) is not None


class Schedule:
    timesteps = torch.tensor([3.0, 2.0, 1.0, 0.5])


def test_the_step_tracker_previews_every_nth_step_and_survives_a_failing_decoder(
    tmp_path: Path,
) -> None:
    jobs = [JobParams("a", job(every=2).generation), JobParams("b", job(every=0).generation)]
    events: list = []
    calls: list[int] = []

    def previewer(latents: torch.Tensor, index: int, params: JobParams) -> Preview:
        calls.append(index)
        if len(calls) == 2:
            raise RuntimeError("decoder broke")
        return Preview(b"picture", "image/webp")

    tracker = StepTracker(
        model="m",
        jobs=jobs,
        generators=[torch.Generator() for _ in jobs],
        control=BatchControl(["a", "b"]),
        terminals=Terminals(events.append),
        checkpoint_dir=tmp_path,
        scheduler=Schedule(),
        previewer=previewer,
    )
    for index in range(4):
        tracker.on_step(index, torch.zeros(2, 4, 2, 2))
    steps = {(e.job_id, e.step): e.preview for e in events if isinstance(e, StepDone)}
    assert len(steps) == 8
    assert steps[("a", 2)] == Preview(b"picture", "image/webp")
    assert steps[("a", 4)] is None  # the decoder failed; the job went on
    assert all(steps[("a", s)] is None for s in (1, 3))
    assert all(steps[("b", s)] is None for s in range(1, 5))
    assert calls == [0, 0]


def test_echo_previews_show_the_seed_colour_on_the_steps_asked() -> None:
    echo = EchoHost(spec_of("echo"), "cpu")
    generation = GenerationParams("x", steps=4, seed=5, width=24, height=8, preview_every_steps=2)
    events: list = []
    echo.run_batch([JobParams("a", generation)], BatchControl(["a"]), events.append)
    previews = {e.step: e.preview for e in events if isinstance(e, StepDone)}
    assert [step for step, p in previews.items() if p is not None] == [2, 4]
    image = decoded(previews[2]).convert("RGB")  # type: ignore[arg-type]
    assert image.size == (24, 8)
    centre = np.asarray(image, dtype=int)[4, 12]
    assert np.abs(centre - seed_colour(5)).max() < 12
