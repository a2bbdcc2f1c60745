"""LoRA adapters: the registry's declaration and a request's choice, checked and resolved.

Pure: the registry, the gateway and the scheduler use it with plain values. Every error
names the field and the limit it broke; an adapter the entry does not declare is NOT_FOUND.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from mediamesh.common.errors import InvalidArgument, NotFound
from mediamesh.common.generation import AdapterScale
from mediamesh.common.limits import MODEL_NAME_PATTERN

# Scales a request may ask for: negative scales invert an adapter, and beyond a few times
# its trained strength an adapter only produces noise.
SCALE_RANGE = (-4.0, 4.0)
# Adapters one request may name unless the mesh's settings say otherwise.
DEFAULT_MAX_ADAPTERS_PER_REQUEST = 4
# Adapters a worker keeps loaded per model unless its settings say otherwise.
DEFAULT_MAX_LOADED_ADAPTERS = 8


class AdapterSpec(BaseModel):
    """One LoRA adapter a registry entry offers (`adapters:` on the entry)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The name requests use (AdapterRef.name) and the worker's peft adapter name.
    name: str = Field(min_length=1, pattern=MODEL_NAME_PATTERN)
    # A local folder or file (`{models_dir}` is expanded, as for models) or a hub id.
    source: str = Field(min_length=1)
    # The weights file inside `source`; unset lets diffusers find the usual one.
    weight_name: str | None = None
    # The scale of a request that names the adapter without one.
    default_scale: float = Field(1.0, ge=SCALE_RANGE[0], le=SCALE_RANGE[1], strict=True)

    def resolved_source(self, models_dir: Path) -> str:
        """Expands `{models_dir}` so one registry works wherever the adapters were built."""
        return self.source.replace("{models_dir}", str(models_dir))


@dataclass(frozen=True)
class AdapterRequest:
    """An adapter a caller named; `scale` None takes the entry's default."""

    name: str
    scale: float | None = None


def resolve_adapters(
    model: str,
    offered: tuple[AdapterSpec, ...],
    requested: tuple[AdapterRequest, ...],
    max_per_request: int,
) -> tuple[AdapterScale, ...]:
    """The requested adapters with every scale resolved, in request order.

    InvalidArgument for too many, a missing or repeated name or a scale out of range;
    NotFound naming an adapter the model's entry does not offer."""
    if len(requested) > max_per_request:
        raise InvalidArgument(
            f"adapters: {len(requested)} given; at most {max_per_request} per request"
        )
    by_name = {spec.name: spec for spec in offered}
    seen: set[str] = set()
    resolved = []
    for index, ask in enumerate(requested):
        field = f"adapters[{index}]"
        if not ask.name:
            # An unnamed adapter is a malformed request, not a name the entry lacks.
            raise InvalidArgument(
                f"{field}.name: required; name an adapter of model {model!r} "
                f"(known: {', '.join(by_name) or 'none'})"
            )
        if ask.name in seen:
            raise InvalidArgument(f"{field}.name: {ask.name!r} is named twice; name it once")
        seen.add(ask.name)
        spec = by_name.get(ask.name)
        if spec is None:
            known = ", ".join(by_name) or "none"
            raise NotFound(
                f"{field}.name: adapter {ask.name!r} is not offered by model {model!r}; "
                f"known: {known}"
            )
        # Rounded: a float32 0.8 off the wire must batch with a 0.8 typed anywhere else.
        scale = round(spec.default_scale if ask.scale is None else float(ask.scale), 6)
        low, high = SCALE_RANGE
        if not low <= scale <= high:
            raise InvalidArgument(f"{field}.scale: {scale} is out of range; allowed {low}..{high}")
        resolved.append(AdapterScale(ask.name, scale))
    return tuple(resolved)


def parse_adapter_list(text: str, field: str = "adapters") -> tuple[AdapterRequest, ...]:
    """Adapters written as "name:scale,name:scale" (a name alone takes its default scale),
    the form of the KServe parameter and the CLI flag; InvalidArgument naming `field`."""
    if not text.strip():
        return ()
    found = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            # "a,,b" or ",,,": a name left out by mistake would be dropped without a word.
            raise InvalidArgument(
                f"{field}: {text[:64]!r} has an empty entry; write name:scale,name:scale"
            )
        name, sep, scale_text = part.partition(":")
        name = name.strip()
        if not name:
            raise InvalidArgument(f"{field}: {part!r} has no adapter name; write name:scale")
        scale: float | None = None
        if sep:
            try:
                scale = float(scale_text)
            except ValueError:
                raise InvalidArgument(
                    f"{field}: scale {scale_text.strip()!r} of {name!r} is not a number"
                ) from None
        found.append(AdapterRequest(name, scale))
    return tuple(found)


def check_adapters(
    model: str, offered: tuple[AdapterSpec, ...], adapters: tuple[AdapterScale, ...]
) -> None:
    """The checks of `resolve_adapters` (names, repeats, scales; not the count, which is
    the mesh's setting) on adapters already resolved: a worker runs them on each job.

    All are InvalidArgument: an unknown name here is a job that does not fit this model
    (`resolve` has already answered NOT_FOUND to any caller who named one)."""
    asked = tuple(AdapterRequest(a.name, a.scale) for a in adapters)
    try:
        resolve_adapters(model, offered, asked, max_per_request=len(asked))
    except NotFound as exc:
        raise InvalidArgument(exc.message) from None
