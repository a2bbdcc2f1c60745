"""What differs between pipeline families, as data the generic host reads.

Everything else (which request fields a call takes, which step hook it offers, which
output it returns) comes from the pipeline's signature and the model's modality, so a
family that needs nothing special needs no entry here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FamilyQuirks:
    """Declarative differences of one pipeline family."""

    # Video VAEs compress time: the pipeline needs (num_frames - 1) % multiple == 0 and
    # would silently round other counts. The multiple is this pipeline attribute.
    frame_multiple_attribute: str | None = None
    # Times that multiple: CogVideoX's VAE decodes N frames only from an odd number of
    # latent frames ((N - 1) / 4 + 1), so its counts step by 8, and 5 would come back as 8.
    frame_multiple_factor: int = 1
    # The step callback tensor holding the denoised state, for checkpoints and previews.
    latents_key: str = "latents"
    # The tokenizer that bounds `max_sequence_length` (the text encoder with the longest
    # context); None: the highest-numbered `tokenizer*` attribute the pipeline has.
    sequence_tokenizer: str | None = None


DEFAULT_QUIRKS = FamilyQuirks()

FAMILY_QUIRKS: dict[str, FamilyQuirks] = {
    "WanPipeline": FamilyQuirks(frame_multiple_attribute="vae_scale_factor_temporal"),
    "CogVideoXPipeline": FamilyQuirks(
        frame_multiple_attribute="vae_scale_factor_temporal", frame_multiple_factor=2
    ),
    "CogVideoXImageToVideoPipeline": FamilyQuirks(
        frame_multiple_attribute="vae_scale_factor_temporal", frame_multiple_factor=2
    ),
    "LTXPipeline": FamilyQuirks(frame_multiple_attribute="vae_temporal_compression_ratio"),
}


# Pipelines whose `guidance_scale` reaches the model only through the transformer's guidance
# embedding (`if self.transformer.config.guidance_embeds`), never as classifier-free
# guidance: on a transformer without that embedding (FLUX.1-schnell) it does nothing. Not
# the ControlNet variants, whose ControlNet may have an embedding of its own, nor Chroma,
# which runs classifier-free guidance with it.
GUIDANCE_BY_EMBEDDING = frozenset(
    {
        "FluxPipeline",
        "FluxImg2ImgPipeline",
        "FluxInpaintPipeline",
        "FluxFillPipeline",
        "FluxControlPipeline",
        "FluxControlImg2ImgPipeline",
        "FluxControlInpaintPipeline",
        "FluxKontextPipeline",
        "FluxKontextInpaintPipeline",
    }
)


def quirks_for(pipeline: str) -> FamilyQuirks:
    """The family's quirks; families without any get the defaults."""
    return FAMILY_QUIRKS.get(pipeline, DEFAULT_QUIRKS)
