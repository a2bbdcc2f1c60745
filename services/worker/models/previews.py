"""Latent previews: a cheap picture of where a job's denoising stands, taken at a step boundary.

Never a full VAE decode. The latents of one job are brought to an image grid (channels x
height x width: Flux's packed 2x2 patches unpacked, a video's middle frame taken) and then
projected to RGB: by the family's published linear factors where it has them (the Stable
Diffusion 1.x, XL, 3 and FLUX.1 latent spaces, and Wan 2.1's video VAE), by the registry
entry's own `preview.rgb_factors`, by a tiny autoencoder when the entry names one
(`preview.vae`), or else by the latents' three principal directions, which show structure for
any channel count. Audio latents become a heat map of channels over time. Everything runs on
the device thread in the step callback.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mediamesh.common.hub import is_hub_source
from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import JobParams, Preview
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.models.preview_image import encode_heatmap, encode_rgb, preview_size

log = logging.getLogger(__name__)

# Approximate linear maps from 4-channel latents (as the denoiser sees them) to RGB in
# -1..1, one row per channel, as published for these latent spaces (the SD 1.x factors from
# Keturn's 2022 analysis; the XL ones, with their bias, from ComfyUI's comfy/latent_formats.py).
Factors = tuple[tuple[float, float, float], ...]
_SD1_FACTORS: Factors = (
    (0.298, 0.207, 0.208),
    (0.187, 0.286, 0.173),
    (-0.158, 0.189, 0.264),
    (-0.184, -0.271, -0.473),
)
_SDXL_FACTORS: Factors = (
    (0.3651, 0.4232, 0.4341),
    (-0.2533, -0.0042, 0.1068),
    (0.1076, 0.1111, -0.0362),
    (-0.3165, -0.2492, -0.2188),
)
_SDXL_BIAS = (0.1084, -0.0175, -0.0011)

# The 16-channel latent spaces: `latent_rgb_factors` and `latent_rgb_factors_bias` of the
# classes SD3, Flux and Wan21 in ComfyUI's comfy/latent_formats.py (github.com/
# comfyanonymous/ComfyUI), which ComfyUI's latent_preview.py applies as `linear(latents, factors,
# bias)` to RGB in -1..1, as here. ComfyUI applies them to latents in the model's space, after
# its `process_in`: (vae_latent - shift) * scale for SD3 (1.5305, 0.0609) and FLUX.1 (0.3611,
# 0.1159), (vae_latent - latents_mean) / latents_std per channel for Wan 2.1. That is the space
# diffusers' pipelines denoise in, so the step callback's latents take them as they are: the
# SD3 and Flux pipelines undo it before decoding (`latents / vae.config.scaling_factor +
# vae.config.shift_factor`, the same two numbers), the Wan ones with the VAE config's
# latents_mean and latents_std (ComfyUI's Wan21 values). Latents of another channel count (Wan
# 2.2's 48-channel TI2V VAE, say) fall through to the principal projection in `_project`.
_SD3_FACTORS: Factors = (
    (-0.0922, -0.0175, 0.0749),
    (0.0311, 0.0633, 0.0954),
    (0.1994, 0.0927, 0.0458),
    (0.0856, 0.0339, 0.0902),
    (0.0587, 0.0272, -0.0496),
    (-0.0006, 0.1104, 0.0309),
    (0.0978, 0.0306, 0.0427),
    (-0.0042, 0.1038, 0.1358),
    (-0.0194, 0.0020, 0.0669),
    (-0.0488, 0.0130, -0.0268),
    (0.0922, 0.0988, 0.0951),
    (-0.0278, 0.0524, -0.0542),
    (0.0332, 0.0456, 0.0895),
    (-0.0069, -0.0030, -0.0810),
    (-0.0596, -0.0465, -0.0293),
    (-0.1448, -0.1463, -0.1189),
)
_SD3_BIAS = (0.2394, 0.2135, 0.1925)
_FLUX_FACTORS: Factors = (
    (-0.0346, 0.0244, 0.0681),
    (0.0034, 0.0210, 0.0687),
    (0.0275, -0.0668, -0.0433),
    (-0.0174, 0.0160, 0.0617),
    (0.0859, 0.0721, 0.0329),
    (0.0004, 0.0383, 0.0115),
    (0.0405, 0.0861, 0.0915),
    (-0.0236, -0.0185, -0.0259),
    (-0.0245, 0.0250, 0.1180),
    (0.1008, 0.0755, -0.0421),
    (-0.0515, 0.0201, 0.0011),
    (0.0428, -0.0012, -0.0036),
    (0.0817, 0.0765, 0.0749),
    (-0.1264, -0.0522, -0.1103),
    (-0.0280, -0.0881, -0.0499),
    (-0.1262, -0.0982, -0.0778),
)
_FLUX_BIAS = (-0.0329, -0.0718, -0.0851)
_WAN21_FACTORS: Factors = (
    (-0.1299, -0.1692, 0.2932),
    (0.0671, 0.0406, 0.0442),
    (0.3568, 0.2548, 0.1747),
    (0.0372, 0.2344, 0.1420),
    (0.0313, 0.0189, -0.0328),
    (0.0296, -0.0956, -0.0665),
    (-0.3477, -0.4059, -0.2925),
    (0.0166, 0.1902, 0.1975),
    (-0.0412, 0.0267, -0.1364),
    (-0.1293, 0.0740, 0.1636),
    (0.0680, 0.3019, 0.1128),
    (0.0032, 0.0581, 0.0639),
    (-0.1251, 0.0927, 0.1699),
    (0.0060, -0.0633, 0.0005),
    (0.3477, 0.2275, 0.2950),
    (0.1984, 0.0913, 0.1861),
)
_WAN21_BIAS = (-0.1835, -0.0868, -0.3360)
# CogVideoX has no such table here: ComfyUI has no CogVideoX latent format, and the one in
# kijai's ComfyUI-CogVideoXWrapper was tuned by hand for its x0 estimate times 5 (and for one
# of the VAE's two scaling factors, 0.7 of CogVideoX-5b; 2b's is 1.1526), not for the noisy
# latents a diffusers callback sees; CogVideoX stays on the principal projection.

_SD1_PIPELINES = (
    "StableDiffusionPipeline",
    "StableDiffusionImg2ImgPipeline",
    "StableDiffusionInpaintPipeline",
)
_SDXL_PIPELINES = (
    "StableDiffusionXLPipeline",
    "StableDiffusionXLImg2ImgPipeline",
    "StableDiffusionXLInpaintPipeline",
    # PixArt-Sigma denoises in the SDXL autoencoder's latent space.
    "PixArtSigmaPipeline",
)
_SD3_PIPELINES = (  # SD 3 and 3.5 share the autoencoder
    "StableDiffusion3Pipeline",
    "StableDiffusion3Img2ImgPipeline",
    "StableDiffusion3InpaintPipeline",
    "StableDiffusion3ControlNetPipeline",
    "StableDiffusion3ControlNetInpaintingPipeline",
    "StableDiffusion3PAGPipeline",
    "StableDiffusion3PAGImg2ImgPipeline",
)
# FLUX.1's autoencoder (not FLUX.2's 32-channel one). Fill, Kontext and the control pipelines
# concatenate their conditions onto the model's input only: the latents stepped stay 16 channels.
_FLUX_PIPELINES = (
    "FluxPipeline",
    "FluxImg2ImgPipeline",
    "FluxInpaintPipeline",
    "FluxFillPipeline",
    "FluxKontextPipeline",
    "FluxKontextInpaintPipeline",
    "FluxControlPipeline",
    "FluxControlImg2ImgPipeline",
    "FluxControlInpaintPipeline",
    "FluxControlNetPipeline",
    "FluxControlNetImg2ImgPipeline",
    "FluxControlNetInpaintPipeline",
)
# Wan 2.1's video autoencoder, also Wan 2.2 A14B's; latents (batch, channels, frames, h, w).
_WAN21_PIPELINES = (
    "WanPipeline",
    "WanImageToVideoPipeline",
    "WanVideoToVideoPipeline",
    "WanVACEPipeline",
    "WanAnimatePipeline",
)
# Keyed by the registry entry's `pipeline` (the diffusers class name), looked up exactly.
FAMILY_FACTORS: dict[str, tuple[Factors, tuple[float, float, float]]] = {
    **dict.fromkeys(_SD1_PIPELINES, (_SD1_FACTORS, (0.0, 0.0, 0.0))),
    **dict.fromkeys(_SDXL_PIPELINES, (_SDXL_FACTORS, _SDXL_BIAS)),
    **dict.fromkeys(_SD3_PIPELINES, (_SD3_FACTORS, _SD3_BIAS)),
    **dict.fromkeys(_FLUX_PIPELINES, (_FLUX_FACTORS, _FLUX_BIAS)),
    **dict.fromkeys(_WAN21_PIPELINES, (_WAN21_FACTORS, _WAN21_BIAS)),
}
# Video families whose latents are (batch, frames, channels, h, w); the rest put channels
# before frames.
_FRAMES_FIRST_PREFIXES = ("CogVideoX", "ConsisID")
# The signature of the Flux-style unpacker: tokens of 2x2 patches back to an image grid.
_UNPACK_PARAMETERS = ["latents", "height", "width", "vae_scale_factor"]


class LatentPreviewer:
    """Makes the previews of one loaded model; `__call__` is StepTracker's preview hook."""

    def __init__(self, spec: ModelSpec, pipeline: Any) -> None:
        self.spec = spec
        self.pipeline = pipeline
        # A diffusers AutoencoderTiny once `load_tiny_vae` ran.
        self.tiny_vae: Any = None
        own = spec.preview.rgb_factors
        factors, bias = (
            (own, spec.preview.rgb_bias)
            if own
            else FAMILY_FACTORS.get(spec.pipeline, ((), (0.0, 0.0, 0.0)))
        )
        if own:
            _check_own_factors(spec, pipeline)
        self.factors = torch.tensor(factors, dtype=torch.float32) if factors else None
        self.bias = torch.tensor(bias, dtype=torch.float32)
        self._unpack = _flux_unpacker(pipeline)
        self._frames_first = spec.pipeline.startswith(_FRAMES_FIRST_PREFIXES)

    def load_tiny_vae(self, models_dir: Path, device: str) -> None:
        """Loads the entry's `preview.vae` (diffusers AutoencoderTiny), local files only."""
        from diffusers import AutoencoderTiny

        named = self.spec.preview.vae or ""
        source = named.replace("{models_dir}", str(models_dir))
        field = f"model {self.spec.name!r} field preview.vae"
        # The same reading of a source as the model's own: a folder, else a hub id.
        from_hub = is_hub_source(self.spec.model_copy(update={"source": named}), models_dir)
        if not from_hub and not Path(source).is_dir():
            raise ModelLoadError(
                f"{field}: {source} does not exist; put a diffusers AutoencoderTiny folder "
                "there (e.g. a TAESD checkpoint), or leave preview.vae unset to preview by "
                "projection"
            )
        try:
            # A hub id must already be in the cache, like the model itself (`models pull`).
            vae = AutoencoderTiny.from_pretrained(source, local_files_only=True)
        except Exception as exc:
            problem, remedy = (
                (
                    "is not in the Hugging Face cache",
                    "download it there first, or point preview.vae at a local folder",
                )
                if from_hub
                else (
                    "cannot be loaded as a diffusers AutoencoderTiny",
                    "point preview.vae at an AutoencoderTiny folder (e.g. a TAESD checkpoint)",
                )
            )
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise ModelLoadError(f"{field}: {source} {problem}: {reason}; {remedy}") from exc
        self.tiny_vae = vae.to(device).eval()

    def __call__(self, latents: torch.Tensor, index: int, job: JobParams) -> Preview:
        """The preview of job `index` of the batch whose latents these are."""
        generation = job.generation
        one = latents[index : index + 1].detach()
        if self.spec.modality == "audio":
            return encode_heatmap(_audio_grid(one[0].float().cpu()))
        grid = self._image_grid(one, generation.width, generation.height)
        pixels = self._decode(grid) if self.tiny_vae is not None else self._project(grid)
        return encode_rgb(pixels, preview_size(generation.width, generation.height))

    # Latents to (1, channels, h, w) ------------------------------------------------------

    def _image_grid(self, one: torch.Tensor, width: int, height: int) -> torch.Tensor:
        if one.ndim == 5:
            middle = one.shape[1 if self._frames_first else 2] // 2
            return one[:, middle] if self._frames_first else one[:, :, middle]
        if one.ndim == 4:
            return one
        if one.ndim == 3:
            if self._unpack is not None and width and height:
                scale = int(getattr(self.pipeline, "vae_scale_factor", 8))
                try:
                    unpacked: torch.Tensor = self._unpack(one, height, width, scale)
                    return unpacked
                except RuntimeError:
                    pass  # not this packing after all: fall through to the generic grid
            return _tokens_as_grid(one, width, height)
        raise ValueError(f"no preview for latents of shape {tuple(one.shape)}")

    # (1, channels, h, w) to RGB pixels ----------------------------------------------------

    def _project(self, grid: torch.Tensor) -> np.ndarray:
        values = grid[0].float().cpu()
        if self.factors is not None and values.shape[0] == self.factors.shape[0]:
            rgb = torch.einsum("chw,cr->hwr", values, self.factors) + self.bias
            return _to_bytes((rgb + 1.0) / 2.0)
        return _to_bytes(principal_rgb(values))

    @torch.no_grad()
    def _decode(self, grid: torch.Tensor) -> np.ndarray:
        vae = self.tiny_vae
        assert vae is not None
        parameter = next(vae.parameters())
        scale = float(getattr(vae.config, "scaling_factor", 1.0) or 1.0)
        shift = float(getattr(vae.config, "shift_factor", 0.0) or 0.0)
        latents = grid.to(parameter.device, parameter.dtype) / scale + shift
        image = vae.decode(latents, return_dict=False)[0][0].float().cpu()
        return _to_bytes((image.permute(1, 2, 0) + 1.0) / 2.0)


def latent_channels(pipeline: Any) -> int | None:
    """Channels of the latents a pipeline denoises, from its autoencoder's config (`z_dim`
    for Wan's); None when it has no autoencoder that says."""
    config = getattr(getattr(pipeline, "vae", None), "config", None)
    for key in ("latent_channels", "z_dim"):
        value = config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _check_own_factors(spec: ModelSpec, pipeline: Any) -> None:
    # `_project` falls back to the principal projection when the rows do not match the
    # latents, which would hide the entry's factors behind previews that look fine.
    channels = latent_channels(pipeline)
    rows = len(spec.preview.rgb_factors)
    if channels is not None and rows != channels:
        raise ModelLoadError(
            f"model {spec.name!r} field preview.rgb_factors: {rows} rows, but this model's "
            f"latents have {channels} channels; give one [r, g, b] row per latent channel"
        )


def principal_rgb(values: torch.Tensor) -> torch.Tensor:
    """(h, w, 3) in 0..1: the latents' three principal directions over channels, each
    stretched to its own range; fewer than three channels repeat the last one. The sign of
    each direction is fixed (largest loading positive) so colours do not flip between steps."""
    channels = values.shape[0]
    flat = values.reshape(channels, -1)
    centred = flat - flat.mean(dim=1, keepdim=True)
    covariance = centred @ centred.T / max(centred.shape[1], 1)
    _, vectors = torch.linalg.eigh(covariance)
    top = vectors[:, -3:].flip(-1)
    signs = torch.sign(top.gather(0, top.abs().argmax(dim=0, keepdim=True)))
    top = top * torch.where(signs == 0, torch.ones_like(signs), signs)
    components = top.T @ centred
    if components.shape[0] < 3:
        components = torch.cat([components, components[-1:].expand(3 - components.shape[0], -1)])
    low = components.amin(dim=1, keepdim=True)
    high = components.amax(dim=1, keepdim=True)
    stretched = (components - low) / (high - low).clamp_min(1e-6)
    pixels: torch.Tensor = stretched.T.reshape(*values.shape[1:], 3)
    return pixels


def _to_bytes(rgb: torch.Tensor) -> np.ndarray:
    return (rgb.clamp(0.0, 1.0) * 255).round().to(torch.uint8).numpy()


def _tokens_as_grid(one: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Packed tokens (1, tokens, features) laid on the grid the result's aspect suggests,
    features as channels: a shape-agnostic stand-in when the family's unpacker is unknown."""
    tokens = one.shape[1]
    aspect = height / width if width and height else 1.0
    rows = max(1, round(math.sqrt(tokens * aspect)))
    while tokens % rows:
        rows -= 1
    return one[0].reshape(rows, tokens // rows, -1).permute(2, 0, 1).unsqueeze(0)


def _audio_grid(one: torch.Tensor) -> np.ndarray:
    """Rows by time: (channels, time) latents as they are; (channels, time, frequency)
    latents averaged over channels, frequency up."""
    if one.ndim == 2:
        return one.numpy()
    if one.ndim == 3:
        return one.mean(dim=0).T.numpy()
    return one.reshape(1, -1).numpy()


def _flux_unpacker(pipeline: Any) -> Any:
    unpack = getattr(type(pipeline), "_unpack_latents", None)
    if unpack is None:
        return None
    try:
        names = list(inspect.signature(unpack).parameters)
    except (TypeError, ValueError):
        return None
    return unpack if names == _UNPACK_PARAMETERS else None


def latent_previewer(spec: ModelSpec, pipeline: Any) -> LatentPreviewer | None:
    """The previewer of a model, or None when its registry entry turns previews off."""
    if not spec.preview.enabled:
        return None
    return LatentPreviewer(spec, pipeline)
