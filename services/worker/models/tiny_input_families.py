"""Tiny random-weight pipelines that take input images, where a text-to-image build cannot
be reused.

SDXL img2img and inpainting and Flux img2img load the text-to-image folders of
`sdxl-tiny` and `flux-tiny` under their own pipeline class (the registry entry names the
class; `from_pretrained` of a class ignores the folder's `_class_name`). CogVideoX
image-to-video cannot: its transformer reads the noise and the first frame's latents
concatenated on channels, so it needs twice the latent channels in.
"""

from __future__ import annotations

from diffusers import CogVideoXImageToVideoPipeline, CogVideoXTransformer3DModel

from mediamesh.worker.models.tiny_families import T5_MAX_TOKENS
from mediamesh.worker.models.tiny_image_families import build_cogvideox


def build_cogvideox_i2v() -> CogVideoXImageToVideoPipeline:
    """cogvideox-tiny's encoders, VAE and scheduler around a transformer that also reads the
    first frame's latents (8 channels in: 4 of noise, 4 of image)."""
    base = build_cogvideox()
    latent_channels = base.vae.config.latent_channels
    transformer = CogVideoXTransformer3DModel(
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=latent_channels * 2,
        out_channels=latent_channels,
        time_embed_dim=8,
        text_embed_dim=base.text_encoder.config.d_model,
        num_layers=1,
        sample_width=8,
        sample_height=8,
        sample_frames=9,
        patch_size=2,
        temporal_compression_ratio=4,
        max_text_seq_length=T5_MAX_TOKENS,
    ).eval()
    return CogVideoXImageToVideoPipeline(
        tokenizer=base.tokenizer,
        text_encoder=base.text_encoder,
        vae=base.vae,
        transformer=transformer,
        scheduler=base.scheduler,
    )
