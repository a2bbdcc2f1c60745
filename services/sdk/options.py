"""What a client is told: how to connect, and the fields of a generation."""

from __future__ import annotations

import math
import numbers
import operator
import types
import uuid
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, get_args, get_type_hints

from mediamesh.common.addresses import port_problem
from mediamesh.common.limits import INPUT_IMAGE, MAX_SEED
from mediamesh.sdk.types import Priority

DEFAULT_TARGET = "127.0.0.1:50051"
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# One backoff for the channel's retry policy (api/channel.py) and for a job's stream that
# re-attaches with Watch (flow.py): a gateway that is restarting is asked no harder by either.
RETRY_INITIAL_BACKOFF_S = 0.2
RETRY_MAX_BACKOFF_S = 5.0
RETRY_BACKOFF_MULTIPLIER = 2.0
# The mesh's servers take a ping at most every 20 s on a quiet call and end the connection
# with GOAWAY "too_many_pings" for more (common/server.py KEEPALIVE_OPTIONS; not imported, as
# the SDK loads no server code): keepalive_s below it would break every long wait.
GATEWAY_MIN_PING_INTERVAL_S = 20.0
# gRPC takes channel arguments as C ints: the most milliseconds or bytes one may hold.
CHANNEL_INT_MAX = 2**31 - 1


# A host:port address's port (an IPv6 host is bracketed, so its colons come before it).


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
    overload_retries: int | None = None
    max_overload_wait_s: float = 30.0
    reattach_s: float = 60.0

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (a client certificate for mTLS)")
        # Checked here, where each is named: a bad one would otherwise fail every call later
        # in gRPC's words (or a TypeError deep inside a call).
        for name in ("timeout_s", "stream_timeout_s"):
            # A deadline: gRPC needs a finite one, and 0 would fail every call at once.
            value = getattr(self, name)
            if value is not None:
                _check_seconds(
                    name, value, lambda s: 0 < s < math.inf, "a number of seconds above 0, or None"
                )
        # Budgets: no limit (inf) is fine, NaN is not.
        _check_seconds("reattach_s", self.reattach_s, _not_negative, "0 (never) or more seconds")
        _check_seconds(
            "max_overload_wait_s", self.max_overload_wait_s, _not_negative, "0 or more seconds"
        )
        lowest, highest = GATEWAY_MIN_PING_INTERVAL_S, CHANNEL_INT_MAX // 1000
        _check_seconds(
            "keepalive_s",
            self.keepalive_s,
            lambda s: lowest <= s <= highest,
            f"from {lowest:g} to {highest} seconds (the gateway answers pings more often "
            f"than every {lowest:g} s with GOAWAY too_many_pings)",
        )
        _check_whole("max_message_bytes", self.max_message_bytes, 1, CHANNEL_INT_MAX)
        if self.overload_retries is not None:
            _check_whole("overload_retries", self.overload_retries, 0, UINT32_MAX)
        for name in ("tls", "retry_on_overload"):
            # Not truthiness: "no" would turn the setting on.
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}: must be True or False, got {_shown(getattr(self, name))}")
        if self.api_key is not None:
            _check_api_key(self.api_key)
        _check_target(self.target)
        for name in ("ca_file", "cert_file", "key_file"):
            # Read when the channel is made: missing, it failed as a bare "[Errno 2]".
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ValueError(f"{name}: {str(path)!r} is not a file")

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


# What a whole-number option may be: its field is a uint32 on the wire, or the mesh holds it
# to less whatever the model (seed). A model's own limits (max_steps, ...) are the gateway's
# to check, as ListModels tells them.
UINT32_MAX = 2**32 - 1
# timeout_ms: 0 would be a limit no job meets, not "none", which is leaving it unset.
WHOLE_NUMBER_RANGES = {"seed": (0, MAX_SEED), "timeout_ms": (1, UINT32_MAX)}
# The largest finite float32, the most a number option's field can hold.
FLOAT32_MAX = 3.4028234663852886e38
# The options that carry an image in the request itself; each has an `_id` twin naming an
# upload instead.
INLINE_IMAGE_OPTIONS = ("image", "mask_image")
# The fields of mediamesh.v1.Webhook, the `webhook` option's keys.
WEBHOOK_FIELDS = ("url", "events")


def _option_kinds() -> dict[str, type]:
    """Each plain option's type (int, float, str, bytes or bool), from GenerateOptions."""
    kinds = {}
    for name, hint in get_type_hints(GenerateOptions).items():
        plain = [t for t in get_args(hint) if t is not types.NoneType]
        if len(plain) == 1 and plain[0] in (int, float, str, bytes, bool):
            kinds[name] = plain[0]
    return kinds


_OPTION_KINDS = _option_kinds()


@dataclass(frozen=True)
class GenerateParams:
    """A checked generation: the fields that are set, and always an idempotency key."""

    model: str
    prompt: str
    options: Mapping[str, object]

    @property
    def idempotency_key(self) -> str:
        """The key the request is sent with, the caller's or the one made for it."""
        return str(self.options["idempotency_key"])


def generate_params(model: str, prompt: str, options: Mapping[str, object]) -> GenerateParams:
    """Check option names, values and the priority, drop unset fields, and add a key when none
    is given. A bad value raises TypeError (wrong type) or ValueError (out of range) naming
    the option, before anything is sent.

    The gateway answers a repeated key from the same tenant with the job it already has, so a
    call retried after a lost connection cannot make a second job.
    """
    for argument, given in (("model", model), ("prompt", prompt)):
        if not isinstance(given, str):
            raise TypeError(f"{argument}: must be a string, got {_shown(given)}")
    unknown = set(options) - GenerateOptions.__optional_keys__
    if unknown:
        allowed = ", ".join(sorted(GenerateOptions.__optional_keys__))
        raise TypeError(f"unknown generate option(s) {sorted(unknown)}; allowed: {allowed}")
    values = {name: value for name, value in options.items() if value is not None and value != ""}
    for name, value in values.items():
        check_option(name, value)
    for name in INLINE_IMAGE_OPTIONS:
        check_inline_image(name, values.get(name))
    if "priority" in values:
        values["priority"] = Priority.parse(str(values["priority"]))
    if "adapters" in values:
        values["adapters"] = adapter_pairs(values["adapters"])
    if "webhook" in values:
        url, events = webhook_fields(values["webhook"])
        values["webhook"] = {"url": url, "events": list(events)}
    values.setdefault("idempotency_key", f"sdk-{uuid.uuid4().hex}")
    return GenerateParams(model, prompt, values)


def check_option(name: str, value: object) -> None:
    """TypeError naming option `name` when `value` is not of its type, ValueError naming it and
    the range when a number is beyond what its field carries; nothing for other options.

    Checked before anything is sent, so that the message names the field: protobuf itself
    answers a bare "Value out of range: -3"."""
    kind = _OPTION_KINDS.get(name)
    if kind is int:
        low, high = WHOLE_NUMBER_RANGES.get(name, (0, UINT32_MAX))
        allowed = f"{name}: must be a whole number from {low} to {high}"
        number = _whole_number(value)
        if number is None:
            # No range: it would be the wire type's, not the model's (checked by the mesh).
            raise TypeError(f"{name}: must be a whole number, got {_shown(value)}")
        if not low <= number <= high:
            raise ValueError(f"{allowed}, got {number}")
    elif kind is float:
        # True is a number to Python, never a guidance scale or a duration.
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name}: must be a number, got {_shown(value)}")
        real = float(value)
        if math.isfinite(real) and abs(real) > FLOAT32_MAX:
            raise ValueError(
                f"{name}: must be a number from {-FLOAT32_MAX:.8g} to {FLOAT32_MAX:.8g}, "
                f"got {value}"
            )
    elif kind is bool:
        # By type name, numpy's bools (numpy.bool, numpy.bool_) too, which protobuf takes.
        is_bool = type(value).__name__ in ("bool", "bool_")
        if not is_bool and _whole_number(value) not in (0, 1):
            raise TypeError(f"{name}: must be True or False, got {_shown(value)}")
    elif kind is str and not isinstance(value, str):
        raise TypeError(f"{name}: must be a string, got {_shown(value)}")
    elif kind is bytes and not isinstance(value, bytes):
        raise TypeError(f"{name}: must be bytes, got {_shown(value)}")


def _not_negative(seconds: float) -> bool:
    return seconds >= 0


def _check_seconds(name: str, value: object, fits: Callable[[float], bool], allowed: str) -> None:
    """TypeError naming client setting `name` when `value` is not a number, ValueError naming
    it and `allowed` when it does not fit (NaN fits nothing)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: must be {allowed}, got {_shown(value)}")
    if not fits(float(value)):
        raise ValueError(f"{name}: must be {allowed}, got {value}")


def _check_api_key(api_key: object) -> None:
    """TypeError or ValueError naming api_key unless it is printable ASCII, all that gRPC
    metadata (an HTTP/2 header) carries: gRPC would fail every call with INTERNAL "Invalid
    metadata". The key itself is never shown."""
    if not isinstance(api_key, str):
        raise TypeError(f"api_key: must be a str or None, got {type(api_key).__name__}")
    for position, character in enumerate(api_key):
        if not " " <= character <= "~":
            raise ValueError(
                f"api_key: must be printable ASCII (space to ~, as gRPC metadata carries), "
                f"got character U+{ord(character):04X} at position {position}"
            )


def _check_whole(name: str, value: object, low: int, high: int) -> None:
    """TypeError naming client setting `name` when `value` is no whole number, ValueError
    naming it and the range when it is outside low..high."""
    number = _whole_number(value)
    if number is None:
        raise TypeError(f"{name}: must be a whole number, got {_shown(value)}")
    if not low <= number <= high:
        raise ValueError(f"{name}: must be a whole number from {low} to {high}, got {number}")


def check_inline_image(name: str, value: object) -> None:
    """ValueError naming option `name`, the limit and the way round it when `value` is bytes
    above the gateway's inline image limit: sent, it would be refused there, or, above the
    message limit of either side, fail in gRPC's words ("SERVER: Received message larger
    than max"), which name no field."""
    if isinstance(value, bytes) and len(value) > INPUT_IMAGE.max_bytes:
        limit = INPUT_IMAGE.max_bytes
        raise ValueError(
            f"{name}: {len(value)} bytes; the limit for an image sent inline is {limit} bytes "
            f"({limit // 2**20} MiB): upload it with client.upload(...) and pass "
            f"{name}_id=handle.input_id instead"
        )


def _whole_number(value: object) -> int | None:
    """`value` as an int when it is one (numpy's integers too, as protobuf takes them);
    None for anything else, bool included."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 64 else text[:61] + "..."


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
        if not isinstance(name, str):
            raise TypeError(f"adapters: name {name!r} is not a string")
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float)):
            raise TypeError(f"adapters: scale {scale!r} of {name!r} is not a number")
        pairs.append((name, None if scale is None else float(scale)))
    return tuple(pairs)


def webhook_fields(webhook: object) -> tuple[str, tuple[str, ...]]:
    """The `webhook` option's url and events, checked as the gateway would check its message:
    a key it has no field for (`event` for `events`) is a ValueError naming it and the fields
    there are, rather than a callback the caller thinks asked for and never gets; a value of
    the wrong type is a TypeError naming it."""
    if not isinstance(webhook, Mapping):
        raise TypeError(
            f'webhook: give {{"url": "https://...", "events": ["completed", ...]}}, '
            f"got {_shown(webhook)}"
        )
    allowed = " and ".join(WEBHOOK_FIELDS)
    for key in webhook:
        if not isinstance(key, str):
            raise TypeError(f"webhook: field names are strings ({allowed}), got {_shown(key)}")
        if key not in WEBHOOK_FIELDS:
            raise ValueError(f"webhook.{key}: Webhook has no such field; its fields: {allowed}")
    url = webhook.get("url")
    if url is None:
        raise ValueError("webhook.url: missing; give the https:// address to call")
    if not isinstance(url, str):
        raise TypeError(f"webhook.url: must be a string, got {_shown(url)}")
    events = webhook.get("events")
    if events is None:
        return url, ()
    if isinstance(events, str | bytes) or not isinstance(events, Sequence | Set):
        raise TypeError(f"webhook.events: give a list of event names, got {_shown(events)}")
    for index, name in enumerate(events):
        if not isinstance(name, str):
            raise TypeError(f"webhook.events[{index}]: must be a string, got {_shown(name)}")
    return url, tuple(events)


def parse_adapter(text: str) -> tuple[str, float | None]:
    """One adapter written as NAME or NAME:SCALE (the CLI's --adapter); ValueError if malformed."""
    name, sep, scale = text.partition(":")
    if not name.strip():
        raise ValueError(f"adapter {text!r}: write NAME or NAME:SCALE")
    try:
        return name.strip(), float(scale) if sep else None
    except ValueError:
        raise ValueError(f"adapter {text!r}: the scale {scale!r} is not a number") from None


def _check_target(target: object) -> None:
    """ValueError naming the gateway address when gRPC could not dial what was meant: none at
    all, or a port past 65535, which gRPC takes modulo 65536 (99999 dials 34463)."""
    if not isinstance(target, str):
        raise TypeError(f"target: the gateway's address as a string, got {_shown(target)}")
    if not target.strip():
        raise ValueError("target: empty; give the gateway's address, host:port")
    problem = port_problem(target)
    if problem:
        raise ValueError(f"target: {problem}")
