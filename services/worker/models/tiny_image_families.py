"""Tiny random-weight SDXL, SD3, PixArt-Sigma and CogVideoX pipelines (real architectures).

Each builds in seconds on a CPU and runs a 64x64 step in tens of milliseconds. The
schedulers are the ones the real checkpoints ship with, so checkpoint/resume exercises
the same scheduler state a production model has.
"""

from __future__ import annotations

from diffusers import (
    AutoencoderKL,
    AutoencoderKLCogVideoX,
    CogVideoXDDIMScheduler,
    CogVideoXPipeline,
    CogVideoXTransformer3DModel,
    DPMSolverMultistepScheduler,
    EulerDiscreteScheduler,
    FlowMatchEulerDiscreteScheduler,
    PixArtSigmaPipeline,
    PixArtTransformer2DModel,
    SD3Transformer2DModel,
    StableDiffusion3Pipeline,
    StableDiffusionXLPipeline,
    UNet2DConditionModel,
)
from transformers import CLIPTextModelWithProjection

from mediamesh.worker.models.tiny_families import (
    T5_MAX_TOKENS,
    _clip_config,
    _clip_encoder,
    _t5_encoder,
)
from mediamesh.worker.models.tiny_tokenizers import build_clip_tokenizer, build_t5_like_tokenizer

CLIP_HIDDEN = 32


def _clip_with_projection(tokenizer_vocab: int, eos_id: int) -> CLIPTextModelWithProjection:
    encoder = CLIPTextModelWithProjection(_clip_config(CLIP_HIDDEN, tokenizer_vocab, eos_id))
    encoder.eval()
    return encoder


def _image_vae(latent_channels: int = 4, **options: object) -> AutoencoderKL:
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8, 16, 16, 16),
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=8,
        sample_size=64,
        **options,
    ).eval()


def build_sdxl() -> StableDiffusionXLPipeline:
    """Two CLIP encoders into a cross-attention UNet with SDXL's size/crop conditioning."""
    tokenizer = build_clip_tokenizer()
    vocab, eos = len(tokenizer), tokenizer.eos_token_id
    time_embed = 8
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4),
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=time_embed,
        transformer_layers_per_block=(1, 1),
        # Six size/crop numbers embedded, plus the second encoder's pooled projection.
        projection_class_embeddings_input_dim=time_embed * 6 + CLIP_HIDDEN,
        # The two encoders' hidden states are concatenated.
        cross_attention_dim=CLIP_HIDDEN * 2,
        norm_num_groups=16,
    ).eval()
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        steps_offset=1,
        timestep_spacing="leading",
    )
    return StableDiffusionXLPipeline(
        vae=_image_vae(scaling_factor=0.13025),
        text_encoder=_clip_encoder(CLIP_HIDDEN, vocab, eos),
        text_encoder_2=_clip_with_projection(vocab, eos),
        tokenizer=tokenizer,
        tokenizer_2=build_clip_tokenizer(),
        unet=unet,
        scheduler=scheduler,
        add_watermarker=False,
    )


def build_sd3() -> StableDiffusion3Pipeline:
    """Two CLIP encoders and a T5 into an MMDiT, flow-matching Euler."""
    tokenizer = build_clip_tokenizer()
    vocab, eos = len(tokenizer), tokenizer.eos_token_id
    # SD3 pads the concatenated CLIP states up to the T5 width, so T5 is the widest.
    t5_dim = CLIP_HIDDEN * 2
    transformer = SD3Transformer2DModel(
        sample_size=8,
        patch_size=1,
        in_channels=4,
        out_channels=4,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=4,
        joint_attention_dim=t5_dim,
        caption_projection_dim=32,
        pooled_projection_dim=CLIP_HIDDEN * 2,
        pos_embed_max_size=32,
    ).eval()
    return StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=_image_vae(
            scaling_factor=1.5305,
            shift_factor=0.0609,
            use_quant_conv=False,
            use_post_quant_conv=False,
        ),
        text_encoder=_clip_with_projection(vocab, eos),
        tokenizer=tokenizer,
        text_encoder_2=_clip_with_projection(vocab, eos),
        tokenizer_2=build_clip_tokenizer(),
        text_encoder_3=_t5_encoder(t5_dim),
        tokenizer_3=build_t5_like_tokenizer(T5_MAX_TOKENS),
    )


def build_pixart_sigma() -> PixArtSigmaPipeline:
    """A T5 into a DiT with adaLN-single; DPM-Solver++ and the legacy step callback."""
    text_dim = 32
    transformer = PixArtTransformer2DModel(
        sample_size=8,
        num_layers=2,
        patch_size=2,
        attention_head_dim=8,
        num_attention_heads=2,
        caption_channels=text_dim,
        in_channels=4,
        cross_attention_dim=16,
        # Learned variance: twice the latent channels, the pipeline keeps the first half.
        out_channels=8,
        attention_bias=True,
        activation_fn="gelu-approximate",
        num_embeds_ada_norm=1000,
        norm_type="ada_norm_single",
        norm_elementwise_affine=False,
        norm_eps=1e-6,
    ).eval()
    return PixArtSigmaPipeline(
        tokenizer=build_t5_like_tokenizer(T5_MAX_TOKENS),
        text_encoder=_t5_encoder(text_dim),
        vae=_image_vae(scaling_factor=0.13025),
        transformer=transformer,
        scheduler=DPMSolverMultistepScheduler(algorithm_type="dpmsolver++", solver_order=2),
    )


def tiny_cogvideox_transformer(
    *, in_channels: int, out_channels: int, text_dim: int
) -> CogVideoXTransformer3DModel:
    """The 3D expert transformer of cogvideox-tiny (and, reading twice the latent channels,
    of its image-to-video sibling)."""
    return CogVideoXTransformer3DModel(
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=in_channels,
        out_channels=out_channels,
        time_embed_dim=8,
        text_embed_dim=text_dim,
        num_layers=1,
        sample_width=8,
        sample_height=8,
        sample_frames=9,
        patch_size=2,
        temporal_compression_ratio=4,
        # The pipeline pads prompts to max_sequence_length, the tokenizer's length here.
        max_text_seq_length=T5_MAX_TOKENS,
    ).eval()


def build_cogvideox() -> CogVideoXPipeline:
    """A T5 into a 3D expert transformer over a causal video VAE (4x in time)."""
    text_dim = 32
    vae = AutoencoderKLCogVideoX(
        in_channels=3,
        out_channels=3,
        down_block_types=("CogVideoXDownBlock3D",) * 4,
        up_block_types=("CogVideoXUpBlock3D",) * 4,
        block_out_channels=(8, 8, 8, 8),
        latent_channels=4,
        layers_per_block=1,
        norm_num_groups=2,
        temporal_compression_ratio=4,
    ).eval()
    transformer = tiny_cogvideox_transformer(in_channels=4, out_channels=4, text_dim=text_dim)
    return CogVideoXPipeline(
        tokenizer=build_t5_like_tokenizer(T5_MAX_TOKENS),
        text_encoder=_t5_encoder(text_dim),
        vae=vae,
        transformer=transformer,
        scheduler=CogVideoXDDIMScheduler(
            beta_schedule="scaled_linear",
            prediction_type="v_prediction",
            rescale_betas_zero_snr=True,
            timestep_spacing="trailing",
            snr_shift_scale=1.0,
        ),
    )
