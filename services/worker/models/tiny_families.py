"""Tiny random-weight pipelines with the real architectures of Flux, Wan and Stable Audio.

Sizes are chosen for a 2-core CPU: a 64x64 flux-tiny step takes milliseconds. Attention
head counts stay even so tensor parallelism over two ranks can split them.
"""

from __future__ import annotations

from dataclasses import dataclass

from diffusers import (
    AutoencoderKL,
    AutoencoderKLWan,
    AutoencoderOobleck,
    EDMDPMSolverMultistepScheduler,
    FlowMatchEulerDiscreteScheduler,
    FluxPipeline,
    FluxTransformer2DModel,
    StableAudioDiTModel,
    StableAudioPipeline,
    UniPCMultistepScheduler,
    WanPipeline,
    WanTransformer3DModel,
)
from diffusers.pipelines.stable_audio import StableAudioProjectionModel
from transformers import (
    CLIPTextConfig,
    CLIPTextModel,
    T5Config,
    T5EncoderModel,
    UMT5Config,
    UMT5EncoderModel,
)

from mediamesh.worker.models.tiny_tokenizers import build_clip_tokenizer, build_t5_like_tokenizer

T5_MAX_TOKENS = 32


@dataclass(frozen=True)
class FluxSize:
    heads: int
    head_dim: int
    rope_axes: tuple[int, int, int]
    double_blocks: int
    single_blocks: int
    text_dim: int
    vae_channels: tuple[int, ...]


FLUX_SIZES: dict[str, FluxSize] = {
    "tiny": FluxSize(4, 16, (4, 6, 6), 1, 1, 32, (8, 16, 16, 16)),
    "small": FluxSize(8, 64, (8, 28, 28), 2, 5, 128, (32, 64, 64, 64)),
}


def _t5_encoder(d_model: int) -> T5EncoderModel:
    tokenizer_vocab = len(build_t5_like_tokenizer())
    config = T5Config(
        vocab_size=tokenizer_vocab,
        d_model=d_model,
        d_kv=d_model // 4,
        d_ff=d_model * 2,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        feed_forward_proj="gated-gelu",
        pad_token_id=0,
        eos_token_id=1,
        # A PreTrainedConfig keyword that T5Config's dataclass-style annotations leave out.
        decoder_start_token_id=0,  # type: ignore[call-arg]
    )
    encoder = T5EncoderModel(config)
    encoder.eval()
    return encoder


def _clip_config(hidden: int, tokenizer_vocab: int, eos_id: int) -> CLIPTextConfig:
    """The tiny CLIP text config every family shares (with or without a projection head)."""
    return CLIPTextConfig(
        vocab_size=tokenizer_vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=77,
        projection_dim=hidden,
        bos_token_id=0,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )


def _clip_encoder(hidden: int, tokenizer_vocab: int, eos_id: int) -> CLIPTextModel:
    encoder = CLIPTextModel(_clip_config(hidden, tokenizer_vocab, eos_id))
    encoder.eval()
    return encoder


def build_flux(size: str) -> FluxPipeline:
    dims = FLUX_SIZES[size]
    latent_channels = 4
    clip_tokenizer = build_clip_tokenizer()
    clip_hidden = 32 if size == "tiny" else 64
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * len(dims.vae_channels),
        up_block_types=("UpDecoderBlock2D",) * len(dims.vae_channels),
        block_out_channels=dims.vae_channels,
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=8,
        sample_size=64,
        scaling_factor=0.3611,
        shift_factor=0.1159,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
    transformer = FluxTransformer2DModel(
        patch_size=1,
        # Flux packs 2x2 latent patches into the channel axis.
        in_channels=latent_channels * 4,
        num_layers=dims.double_blocks,
        num_single_layers=dims.single_blocks,
        attention_head_dim=dims.head_dim,
        num_attention_heads=dims.heads,
        joint_attention_dim=dims.text_dim,
        pooled_projection_dim=clip_hidden,
        guidance_embeds=True,
        axes_dims_rope=dims.rope_axes,
    )
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=3.0,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=1.15,
        base_image_seq_len=256,
        max_image_seq_len=4096,
    )
    return FluxPipeline(
        scheduler=scheduler,
        vae=vae.eval(),
        text_encoder=_clip_encoder(clip_hidden, len(clip_tokenizer), clip_tokenizer.eos_token_id),
        tokenizer=clip_tokenizer,
        text_encoder_2=_t5_encoder(dims.text_dim),
        tokenizer_2=build_t5_like_tokenizer(T5_MAX_TOKENS),
        transformer=transformer.eval(),
    )


def build_wan() -> WanPipeline:
    tokenizer = build_t5_like_tokenizer(T5_MAX_TOKENS)
    text_dim = 32
    text_encoder = UMT5EncoderModel(
        UMT5Config(
            vocab_size=len(tokenizer),
            d_model=text_dim,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            relative_attention_num_buckets=8,
            feed_forward_proj="gated-gelu",
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
        )
    ).eval()
    vae = AutoencoderKLWan(
        base_dim=8,
        z_dim=16,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
    ).eval()
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=16,
        in_channels=16,
        out_channels=16,
        text_dim=text_dim,
        freq_dim=32,
        ffn_dim=64,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=64,
    ).eval()
    # Wan 2.1 ships UniPC in flow mode; using it here keeps the multistep state (history of
    # model outputs) in the checkpoint/resume path that real Wan checkpoints exercise.
    scheduler = UniPCMultistepScheduler(
        prediction_type="flow_prediction",
        use_flow_sigmas=True,
        flow_shift=3.0,
        num_train_timesteps=1000,
    )
    return WanPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        transformer=transformer,
        vae=vae,
        scheduler=scheduler,
    )


def build_stable_audio() -> StableAudioPipeline:
    tokenizer = build_t5_like_tokenizer(T5_MAX_TOKENS)
    text_dim = 32
    latent_channels = 8
    vae = AutoencoderOobleck(
        encoder_hidden_size=8,
        downsampling_ratios=[2, 4, 4, 4],
        channel_multiples=[1, 2, 2, 2],
        decoder_channels=8,
        decoder_input_channels=latent_channels,
        audio_channels=2,
        sampling_rate=4000,
    ).eval()
    # 320 latents x 128 samples each at 4 kHz: up to 10.24 s, the registry's 10 s limit.
    transformer = StableAudioDiTModel(
        sample_size=320,
        in_channels=latent_channels,
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        num_key_value_attention_heads=1,
        out_channels=latent_channels,
        cross_attention_dim=32,
        time_proj_dim=16,
        # The start and end second embeddings are concatenated: twice conditioning_dim.
        global_states_input_dim=64,
        cross_attention_input_dim=text_dim,
    ).eval()
    projection = StableAudioProjectionModel(
        text_encoder_dim=text_dim, conditioning_dim=32, min_value=0, max_value=512
    ).eval()
    # Stable Audio Open uses CosineDPMSolverMultistepScheduler, whose SDE noise needs the
    # torchsde package; the deterministic EDM DPM-Solver++ keeps the tiny model dependency-free.
    scheduler = EDMDPMSolverMultistepScheduler(
        sigma_min=0.3,
        sigma_max=500,
        sigma_data=1.0,
        prediction_type="v_prediction",
        algorithm_type="dpmsolver++",
        solver_order=2,
    )
    return StableAudioPipeline(
        vae=vae,
        text_encoder=_t5_encoder(text_dim),
        projection_model=projection,
        tokenizer=tokenizer,
        transformer=transformer,
        scheduler=scheduler,
    )
