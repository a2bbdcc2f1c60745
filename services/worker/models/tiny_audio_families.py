"""A tiny random-weight AudioLDM2: the audio family that only has the legacy step callback.

AudioLDM2 is the most composite diffusers pipeline: a CLAP text tower and a T5 encoder
are projected into a GPT-2 that generates the conditioning sequence, a two-stream UNet
denoises a mel-spectrogram latent, and a HiFi-GAN vocoder turns the mel into a waveform.
Every part is real here, only narrow, so the worker exercises the same code a real
checkpoint does. The pipeline checks tokenizer classes (RoBERTa for CLAP, T5 for T5), so
the tokenizers are those classes, built from the shared tiny corpus.
"""

from __future__ import annotations

import json

from diffusers import (
    AudioLDM2Pipeline,
    AudioLDM2ProjectionModel,
    AudioLDM2UNet2DConditionModel,
    AutoencoderKL,
    DDIMScheduler,
)
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    ClapAudioConfig,
    ClapConfig,
    ClapFeatureExtractor,
    ClapModel,
    ClapTextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    RobertaTokenizer,
    SpeechT5HifiGan,
    SpeechT5HifiGanConfig,
    T5Tokenizer,
)

from mediamesh.worker.models.tiny_families import _t5_encoder
from mediamesh.worker.models.tiny_tokenizers import _corpus_lines, _split_words

# The vocoder's rate and its upsampling (16 samples per mel frame): 250 mel frames a second.
SAMPLE_RATE = 4000
MEL_BINS = 16
T5_DIM = 32
GPT2_DIM = 16
CLAP_PROJECTION = 16
ROBERTA_MAX_TOKENS = 32


def build_roberta_tokenizer(vocab_size: int = 400) -> RobertaTokenizer:
    """A byte-level BPE with RoBERTa's specials, trained on the tiny corpus."""
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainable = Tokenizer(models.BPE())
    trainable.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    trainable.train_from_iterator(_corpus_lines(), trainer=trainer)
    state = json.loads(trainable.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    # The annotation says list[str]; the tokenizers BPE model it feeds takes (left, right) pairs.
    return RobertaTokenizer(
        vocab=state["vocab"],
        merges=merges,  # type: ignore[arg-type]
        model_max_length=ROBERTA_MAX_TOKENS,
    )


def build_t5_tokenizer(max_length: int = 32) -> T5Tokenizer:
    """A unigram vocabulary of the corpus words with T5's specials (no sentinel ids)."""
    words = sorted({w for line in _corpus_lines() for w in _split_words(line)})
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    pieces += [("\u2581" + word, -1.0) for word in words]
    return T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=max_length)


def _clap() -> ClapModel:
    tokenizer_vocab = len(build_roberta_tokenizer())
    text = ClapTextConfig(
        vocab_size=tokenizer_vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=ROBERTA_MAX_TOKENS + 2,
        projection_dim=CLAP_PROJECTION,
        bos_token_id=0,
        pad_token_id=1,
        eos_token_id=2,
    )
    # The audio tower only scores several waveforms per prompt, which the worker never
    # asks for; it must exist for ClapModel and is as small as its Swin layout allows.
    audio = ClapAudioConfig(
        spec_size=8,
        window_size=4,
        num_mel_bins=8,
        depths=[1, 1],
        num_attention_heads=[1, 1],
        num_hidden_layers=1,
        hidden_size=16,
        projection_dim=CLAP_PROJECTION,
        patch_size=2,
        patch_stride=2,
        patch_embed_input_channels=4,
    )
    model = ClapModel(
        ClapConfig(
            text_config=text.to_dict(),
            audio_config=audio.to_dict(),
            projection_dim=CLAP_PROJECTION,
        )
    )
    model.eval()
    return model


def build_audioldm2() -> AudioLDM2Pipeline:
    """CLAP + T5 -> GPT-2 -> two-stream UNet over mel latents -> HiFi-GAN; DDIM."""
    language_model = GPT2LMHeadModel(
        GPT2Config(
            n_embd=GPT2_DIM,
            n_head=2,
            n_layer=1,
            vocab_size=64,
            n_positions=64,
            bos_token_id=0,
            eos_token_id=0,
        )
    ).eval()
    # The pipeline reads the generated sequence length from the model config.
    language_model.config.max_new_tokens = 4
    unet = AudioLDM2UNet2DConditionModel(
        sample_size=16,
        in_channels=4,
        out_channels=4,
        block_out_channels=(16, 32),
        layers_per_block=1,
        norm_num_groups=8,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        # Per attention block: self-attention, the GPT-2 sequence, then the T5 states.
        cross_attention_dim=([None, GPT2_DIM, T5_DIM], [None, GPT2_DIM, T5_DIM]),
        attention_head_dim=4,
    ).eval()
    vae = AutoencoderKL(
        in_channels=1,
        out_channels=1,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        block_out_channels=(8, 16),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=8,
        sample_size=32,
    ).eval()
    vocoder = SpeechT5HifiGan(
        SpeechT5HifiGanConfig(
            model_in_dim=MEL_BINS,
            sampling_rate=SAMPLE_RATE,
            upsample_initial_channel=16,
            upsample_rates=[4, 4],
            upsample_kernel_sizes=[8, 8],
            resblock_kernel_sizes=[3],
            resblock_dilation_sizes=[[1, 3]],
            normalize_before=False,
            # The default initialisation (0.01) gives a near-silent waveform (1e-5) that
            # 16-bit PCM rounds to zero; this one gives a signal tests can compare.
            initializer_range=0.2,
        )
    ).eval()
    return AudioLDM2Pipeline(
        vae=vae,
        text_encoder=_clap(),
        text_encoder_2=_t5_encoder(T5_DIM),
        projection_model=AudioLDM2ProjectionModel(
            text_encoder_dim=CLAP_PROJECTION, text_encoder_1_dim=T5_DIM, langauge_model_dim=GPT2_DIM
        ).eval(),
        language_model=language_model,
        tokenizer=build_roberta_tokenizer(),
        tokenizer_2=build_t5_tokenizer(),
        feature_extractor=ClapFeatureExtractor(feature_size=8, sampling_rate=SAMPLE_RATE),
        unet=unet,
        scheduler=DDIMScheduler(
            beta_start=0.0015,
            beta_end=0.0195,
            beta_schedule="scaled_linear",
            clip_sample=False,
            set_alpha_to_one=False,
        ),
        vocoder=vocoder,
    )
