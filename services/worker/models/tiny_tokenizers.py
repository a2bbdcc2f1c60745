"""Tokenizers for the tiny offline models, built from a small built-in corpus.

Real checkpoints ship trained tokenizers; the tiny models cannot download any, so they get
small vocabularies trained here. They only need to be deterministic and shaped like the
real ones so the pipelines' tokenizer calls (padding, truncation, eos) behave the same.
"""

from __future__ import annotations

import json
import string

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
from transformers import CLIPTokenizer, PreTrainedTokenizerFast

_CORPUS = """
a photo of a cat sitting on a red chair in the sun
an astronaut riding a horse on the moon, digital art, highly detailed
a bowl of fruit on a wooden table, oil painting
a city street at night with neon lights and rain
a dog running on the beach at sunset, photograph
a small robot reading a book in a library
mountains covered in snow under a blue sky
a portrait of an old man with a white beard
the sound of waves crashing on rocks, seagulls in the distance
a drum loop at 120 bpm with a deep bass line and bright hats
a piano melody, soft and slow, with birds singing
a video of clouds moving over green hills, time lapse
fireworks exploding over a river, slow motion video
blurry, low quality, distorted, ugly, watermark, text
"""


def _corpus_lines() -> list[str]:
    lines = [line.strip() for line in _CORPUS.splitlines() if line.strip()]
    # Every printable character on its own, so no input byte maps to <unk> at a word end.
    lines.append(" ".join(string.ascii_letters + string.digits + string.punctuation))
    return lines


def build_clip_tokenizer(vocab_size: int = 600, max_length: int = 77) -> CLIPTokenizer:
    """A byte-level BPE like CLIP's, trained with CLIP's own normalizer and pre-tokenizer."""
    template = CLIPTokenizer()
    backend = template.backend_tokenizer
    trainable = Tokenizer(
        models.BPE(continuing_subword_prefix="", end_of_word_suffix="</w>", unk_token=None)
    )
    trainable.normalizer = backend.normalizer
    trainable.pre_tokenizer = backend.pre_tokenizer
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|startoftext|>", "<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        end_of_word_suffix="</w>",
        show_progress=False,
    )
    trainable.train_from_iterator(_corpus_lines(), trainer=trainer)
    model_state = json.loads(trainable.to_str())["model"]
    merges = [
        tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model_state["merges"]
    ]
    # The annotation says list[str]; the tokenizers BPE model it feeds takes (left, right) pairs.
    return CLIPTokenizer(
        vocab=model_state["vocab"],
        merges=merges,  # type: ignore[arg-type]
        model_max_length=max_length,
    )


def build_t5_like_tokenizer(max_length: int = 32) -> PreTrainedTokenizerFast:
    """A word-level stand-in for T5/UMT5's sentencepiece model: same specials, eos appended."""
    specials = ["<pad>", "</s>", "<unk>"]
    words = sorted({w for line in _corpus_lines() for w in _split_words(line)})
    vocab = {token: index for index, token in enumerate(specials + words)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", vocab["</s>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=max_length,
        padding_side="right",
    )


def _split_words(line: str) -> list[str]:
    pre = pre_tokenizers.Whitespace()
    return [piece.lower() for piece, _ in pre.pre_tokenize_str(line)]
