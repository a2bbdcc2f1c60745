"""Tiny random-weight pipelines that take input images, where a text-to-image build cannot
be reused.

SDXL img2img and inpainting and Flux img2img load the text-to-image folders of
`sdxl-tiny` and `flux-tiny` under their own pipeline class (the registry entry names the
class; `from_pretrained` of a class ignores the folder's `_class_name`). CogVideoX
image-to-video cannot: its transformer reads the noise and the first frame's latents
concatenated on channels, so it needs twice the latent channels in.
"""

from __future__ import annotations

from diffusers import CogVideoXImageToVideoPipeline

from mediamesh.worker.models.tiny_image_families import build_cogvideox, tiny_cogvideox_transformer


def build_cogvideox_i2v() -> CogVideoXImageToVideoPipeline:
    """cogvideox-tiny's encoders, VAE and scheduler around a transformer that also reads the
    first frame's latents (8 channels in: 4 of noise, 4 of image)."""
    base = build_cogvideox()
    latent_channels = base.vae.config.latent_channels
    transformer = tiny_cogvideox_transformer(
        in_channels=latent_channels * 2,
        out_channels=latent_channels,
        text_dim=base.text_encoder.config.d_model,
    )
    return CogVideoXImageToVideoPipeline(
        tokenizer=base.tokenizer,
        text_encoder=base.text_encoder,
        vae=base.vae,
        transformer=transformer,
        scheduler=base.scheduler,
    )
