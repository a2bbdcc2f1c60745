"""Prompts longer than any text encoder reads: refused by name, not silently cut.

Each text encoder reads at most a window of tokens: a CLIP tokenizer's `model_max_length`
(77), a T5's `max_sequence_length` of the call (the worker cuts it to its tokenizer's own
length, see `PipelineHost._sequence_budget`). The pipeline truncates a longer prompt without
a word, so two prompts that differ only past the window would give the same result.

A prompt is refused only when it is longer than every window, that is than the longest: a
Flux or SD3 prompt that fits T5's window is taken although CLIP cuts its pooled copy, since
T5 still reads all of it. Tokenizing is cheap (about a millisecond for a long prompt) and
runs in the device thread with the rest of a job's refusal checks, where the pipeline's own
tokenizers are used anyway; a prompt that fits the longest window is tokenized once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diffusers import DiffusionPipeline

# A `model_max_length` this large declares no limit (transformers' VERY_LARGE_INTEGER when a
# checkpoint sets none): such an encoder reads any prompt whole.
UNBOUNDED = 10**9


@dataclass(frozen=True)
class TokenWindow:
    """One tokenizer of a pipeline and the most tokens its text encoder reads."""

    # The pipeline attribute, e.g. "tokenizer_2".
    name: str
    tokenizer: Any
    limit: int
    # Where the limit comes from: "model_max_length" or "max_sequence_length".
    source: str


def token_windows(
    pipeline: DiffusionPipeline, sequence_tokenizer: str | None, sequence_length: int | None
) -> tuple[TokenWindow, ...]:
    """The pipeline's tokenizers with their windows, longest first.

    `sequence_tokenizer` is the one the call's `max_sequence_length` (`sequence_length`)
    bounds; the others read their tokenizer's `model_max_length`. Empty, so that nothing is
    refused, when a tokenizer reads without limit or declares no length: a guess could
    refuse a prompt the model reads whole."""
    windows = []
    for name, component in pipeline.components.items():
        if not name.startswith("tokenizer") or component is None or not callable(component):
            continue
        declared = getattr(component, "model_max_length", None)
        if name == sequence_tokenizer and sequence_length is not None:
            limit, source = sequence_length, "max_sequence_length"
        elif isinstance(declared, int):
            limit, source = declared, "model_max_length"
        else:
            return ()
        if limit >= UNBOUNDED:
            return ()
        windows.append(TokenWindow(name, component, limit, source))
    return tuple(sorted(windows, key=lambda window: -window.limit))


def overlong(field: str, text: str, windows: tuple[TokenWindow, ...], model: str) -> str | None:
    """Why `text` (request field `field`) is longer than every window, or None."""
    if not text or not windows:
        return None
    counts = []
    for window in windows:
        count = token_count(window.tokenizer, text)
        if count <= window.limit:
            return None
        counts.append(count)
    longest = windows[0]
    return (
        f"{field}: {counts[0]} tokens; {model} reads at most {longest.limit} "
        f"({longest.name}'s {longest.source}), and the pipeline would cut the rest off "
        f"silently; shorten {field}"
    )


def token_count(tokenizer: Any, text: str) -> int:
    """Tokens of `text` as the pipeline's call counts them: with the special tokens (BOS,
    EOS) that its window includes, and without truncation."""
    # verbose=False: transformers would log a warning for every text past its length.
    encoded = tokenizer(text, add_special_tokens=True, truncation=False, verbose=False)
    return len(encoded["input_ids"])
