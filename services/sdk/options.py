"""What a client is told: how to connect, and the fields of a generation."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from mediamesh.sdk.types import Priority

DEFAULT_TARGET = "127.0.0.1:50051"
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ClientSettings:
    """How a Client or AsyncClient reaches a gateway; see Client for each field."""

    target: str = DEFAULT_TARGET
    api_key: str | None = field(default=None, repr=False)
    tls: bool = False
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    timeout_s: float | None = 30.0
    stream_timeout_s: float | None = None
    keepalive_s: float = 60.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    retry_on_overload: bool = False
    overload_retries: int = 5
    max_overload_wait_s: float = 30.0

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (a client certificate for mTLS)")

    @property
    def uses_tls(self) -> bool:
        """TLS is on when asked for, or implied by a CA or client certificate."""
        return self.tls or self.ca_file is not None or self.cert_file is not None


class GenerateOptions(TypedDict, total=False):
    """The optional fields of mediamesh.v1.GenerateRequest; None leaves a field unset, so the
    model's default applies."""

    negative_prompt: str | None
    steps: int | None
    seed: int | None
    width: int | None
    height: int | None
    num_frames: int | None
    guidance_scale: float | None
    duration_s: float | None
    output_format: str | None
    output_quality: int | None
    fps: int | None
    # Attach a latent preview to every Nth Progress (Progress.preview); 0 or None: none.
    preview_every_steps: int | None
    # False runs without the model's step cache (reference quality).
    cache: bool | None
    priority: Priority | str | None
    timeout_ms: int | None
    idempotency_key: str | None
    # Input images (PNG, JPEG or WebP bytes) for models listing them in ModelInfo.inputs, or
    # the input_id of an earlier Client.upload; and how far to move from the image (0..1].
    image: bytes | None
    mask_image: bytes | None
    image_id: str | None
    mask_image_id: str | None
    strength: float | None
    # Answer with a presigned URL of the result (Result.url) instead of its bytes.
    result_as_url: bool | None
    # Signed HTTP callbacks: {"url": "https://...", "events": ["completed", "failed"]}.
    webhook: Mapping[str, object] | None
    # LoRA adapters of the model (ModelInfo.adapters): {name: scale} or (name, scale) pairs;
    # a scale of None takes the adapter's default_scale.
    adapters: Mapping[str, float | None] | Sequence[tuple[str, float | None]] | None


@dataclass(frozen=True)
class GenerateParams:
    """A checked generation: the fields that are set, and always an idempotency key."""

    model: str
    prompt: str
    options: Mapping[str, object]


def generate_params(model: str, prompt: str, options: Mapping[str, object]) -> GenerateParams:
    """Check option names and the priority, drop unset fields, and add a key when none is given.

    The gateway answers a repeated key from the same tenant with the job it already has, so a
    call retried after a lost connection cannot make a second job.
    """
    unknown = set(options) - GenerateOptions.__optional_keys__
    if unknown:
        allowed = ", ".join(sorted(GenerateOptions.__optional_keys__))
        raise TypeError(f"unknown generate option(s) {sorted(unknown)}; allowed: {allowed}")
    values = {name: value for name, value in options.items() if value is not None and value != ""}
    if "priority" in values:
        values["priority"] = Priority.parse(str(values["priority"]))
    if "adapters" in values:
        values["adapters"] = adapter_pairs(values["adapters"])
    values.setdefault("idempotency_key", f"sdk-{uuid.uuid4().hex}")
    return GenerateParams(model, prompt, values)


def adapter_pairs(adapters: object) -> tuple[tuple[str, float | None], ...]:
    """The `adapters` option as (name, scale) pairs, in the order given."""
    items: list[object]
    if isinstance(adapters, Mapping):
        items = list(adapters.items())
    elif isinstance(adapters, Sequence) and not isinstance(adapters, str):
        items = list(adapters)
    else:
        raise TypeError("adapters: give {name: scale} or a sequence of (name, scale) pairs")
    pairs = []
    for item in items:
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise TypeError(f"adapters: {item!r} is not a (name, scale) pair")
        name, scale = item
        pairs.append((str(name), None if scale is None else float(scale)))
    return tuple(pairs)


def parse_adapter(text: str) -> tuple[str, float | None]:
    """One adapter written as NAME or NAME:SCALE (the CLI's --adapter); ValueError if malformed."""
    name, sep, scale = text.partition(":")
    if not name.strip():
        raise ValueError(f"adapter {text!r}: write NAME or NAME:SCALE")
    try:
        return name.strip(), float(scale) if sep else None
    except ValueError:
        raise ValueError(f"adapter {text!r}: the scale {scale!r} is not a number") from None
