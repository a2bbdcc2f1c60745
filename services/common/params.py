"""Validate a generation request against its model's limits and fill in defaults.

Pure: the gateway and the scheduler both call it, with plain values decoded by their api
layers. Every error names the field and the limit it broke.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace

from mediamesh.common.adapters import (
    DEFAULT_MAX_ADAPTERS_PER_REQUEST,
    AdapterRequest,
    check_adapters,
    resolve_adapters,
)
from mediamesh.common.denoising_steps import denoising_steps
from mediamesh.common.errors import InvalidArgument, NotFound
from mediamesh.common.generation import GenerationParams, Priority
from mediamesh.common.input_images import check_input_params, resolve_inputs
from mediamesh.common.limits import MAX_SEED, MAX_TIMEOUT_MS
from mediamesh.common.output_formats import LOSSY_IMAGE_FORMATS, QUALITY_RANGE, fps_range
from mediamesh.common.registry import MODEL_FIELDS, ModelSpec, Registry
from mediamesh.common.shown_numbers import shown


@dataclass(frozen=True)
class RequestFields:
    """A caller's request; None means unset (the model's default applies)."""

    model: str
    prompt: str
    negative_prompt: str = ""
    steps: int | None = None
    seed: int | None = None
    width: int | None = None
    height: int | None = None
    num_frames: int | None = None
    guidance_scale: float | None = None
    duration_s: float | None = None
    output_format: str = ""
    output_quality: int | None = None
    fps: int | None = None
    # False: run without the model's step cache; None or True: with it, if it has one.
    cache: bool | None = None
    preview_every_steps: int | None = None
    priority: str = "STANDARD"
    timeout_ms: int | None = None
    # Input images: inline bytes (None: not sent) or an Upload's id ("": none).
    image: bytes | None = None
    mask_image: bytes | None = None
    image_id: str = ""
    mask_image_id: str = ""
    strength: float | None = None
    # LoRA adapters by registry name; a scale of None takes the entry's default_scale.
    adapters: tuple[AdapterRequest, ...] = ()
    # Inputs whose bytes the scheduler read from the upload the caller named; their ids stay
    # set, so that errors about them name the id field the caller set.
    from_uploads: frozenset[str] = frozenset()


def find_model(registry: Registry, name: str) -> ModelSpec:
    if not name:
        raise InvalidArgument("model: required (see ListModels for the available names)")
    spec = registry.get(name)
    if spec is None:
        raise NotFound(
            f"model: {name!r} is not in the registry; known: {', '.join(registry.names)}"
        )
    return spec


def parse_priority(name: str) -> Priority:
    try:
        return Priority[name or "STANDARD"]
    except KeyError:
        raise InvalidArgument(
            f"priority: unknown value {name!r}; use REALTIME, STANDARD or BATCH"
        ) from None


def _check_range(field: str, value: float, low: float, high: float, why: str = "") -> None:
    if not low <= value <= high:
        raise InvalidArgument(
            f"{field}: {shown(value)} is out of range; allowed {low}..{high}{why}"
        )


def _check_prompt(field: str, text: str, limit: int, required: bool) -> None:
    if required and not text.strip():
        raise InvalidArgument(f"{field}: must not be empty")
    if len(text) > limit:
        raise InvalidArgument(f"{field}: {len(text)} characters; the limit is {limit}")
    if "\x00" in text:
        raise InvalidArgument(f"{field}: must not contain NUL characters")


def resolve(
    spec: ModelSpec,
    fields: RequestFields,
    *,
    max_adapters: int = DEFAULT_MAX_ADAPTERS_PER_REQUEST,
) -> GenerationParams:
    """Validated parameters with the model's defaults applied and a seed chosen;
    `max_adapters` is the mesh's max_adapters_per_request."""
    d = spec.defaults
    check_accepted(spec, fields)
    if fields.timeout_ms is not None:
        # 0 is set, so it is not "none" (that is leaving it unset), and no job fits in it.
        _check_range(
            "timeout_ms", fields.timeout_ms, 1, MAX_TIMEOUT_MS, "; leave it unset for no limit"
        )
    width = height = frames = 0
    duration = 0.0
    if spec.modality in ("image", "video"):
        width = d.width if fields.width is None else fields.width
        height = d.height if fields.height is None else fields.height
    if spec.modality == "video":
        frames = d.num_frames if fields.num_frames is None else fields.num_frames
    if spec.modality == "audio":
        duration = d.duration_s if fields.duration_s is None else fields.duration_s
    params = GenerationParams(
        prompt=fields.prompt,
        negative_prompt=fields.negative_prompt,
        steps=d.steps if fields.steps is None else fields.steps,
        seed=fields.seed if fields.seed is not None else secrets.randbits(63),
        width=width,
        height=height,
        num_frames=frames,
        guidance_scale=d.guidance_scale if fields.guidance_scale is None else fields.guidance_scale,
        duration_s=duration,
        adapters=resolve_adapters(spec.name, spec.adapters, fields.adapters, max_adapters),
        preview_every_steps=fields.preview_every_steps or 0,
    )
    params = resolve_inputs(
        spec,
        params,
        {"image": fields.image, "mask_image": fields.mask_image},
        {"image": fields.image_id, "mask_image": fields.mask_image_id},
        fields.strength,
        fields.from_uploads,
        size_set=fields.width is not None or fields.height is not None,
    )
    check_generation(spec, params)
    output_format, quality, fps = resolve_output(spec, fields)
    # A model without a cache runs every job in full, so asking for none is harmless; it is
    # recorded as the default so such jobs still share batches.
    use_cache = spec.cache is None or fields.cache is not False
    return replace(
        params, output_format=output_format, output_quality=quality, fps=fps, use_cache=use_cache
    )


def check_generation(spec: ModelSpec, params: GenerationParams) -> None:
    """InvalidArgument naming the first value of `params` outside the model's limits.

    `resolve` checks what a caller asked for with it; a worker checks each job it is sent
    again, because a job past the limits (a step count of 2**32 - 1, an image of 4 billion
    pixels) would hold its device or its memory rather than fail.
    """
    lim = spec.limits
    _check_prompt("prompt", params.prompt, lim.max_prompt_chars, required=True)
    _check_prompt("negative_prompt", params.negative_prompt, lim.max_prompt_chars, required=False)
    _check_range("steps", params.steps, 1, lim.max_steps)
    _check_range("guidance_scale", params.guidance_scale, 0.0, lim.max_guidance_scale)
    check_negative_prompt(spec, params)
    if spec.modality in ("image", "video"):
        for name, value, high in (
            ("width", params.width, lim.max_width),
            ("height", params.height, lim.max_height),
        ):
            _check_range(name, value, lim.size_multiple, high)
            if value % lim.size_multiple:
                raise InvalidArgument(
                    f"{name}: {value} must be a multiple of {lim.size_multiple} for {spec.name}"
                )
    if spec.modality == "video":
        frames = params.num_frames
        _check_range("num_frames", frames, 1, lim.max_num_frames)
        if (frames - 1) % lim.frame_multiple:
            raise InvalidArgument(
                f"num_frames: {frames} is not allowed for {spec.name}; "
                f"(num_frames - 1) must be a multiple of {lim.frame_multiple}"
            )
    if spec.modality == "audio":
        _check_range("duration_s", params.duration_s, 0.1, lim.max_duration_s)
    _check_range("seed", params.seed, 0, MAX_SEED)
    check_input_params(spec, params)
    check_adapters(spec.name, spec.adapters, params.adapters)
    check_preview(spec, params)


def check_negative_prompt(spec: ModelSpec, params: GenerationParams) -> None:
    """InvalidArgument when `params` has a negative prompt that its model would drop: one
    that acts only through classifier-free guidance, which the pipeline runs only with
    guidance_scale above its floor (the request's guidance, else the model's default)."""
    cfg_floor = spec.negative_prompt_cfg_floor
    if not params.negative_prompt or cfg_floor is None:
        return
    guidance = params.guidance_scale
    if guidance > cfg_floor:
        return
    floor = shown(cfg_floor).removesuffix(".0")
    default = " (the model's default)" if guidance == spec.defaults.guidance_scale else ""
    raise InvalidArgument(
        f"negative_prompt: takes effect only with guidance_scale above {floor} "
        f"(classifier-free guidance); this request's guidance_scale is "
        f"{shown(guidance).removesuffix('.0')}{default}; set guidance_scale above {floor} "
        "or leave negative_prompt unset"
    )


def check_preview(spec: ModelSpec, params: GenerationParams) -> None:
    """InvalidArgument when `params` asks for previews the model does not make, or at an
    interval the steps the job runs never reach (0 asks for none): with an input image and
    a strength below 1 that is only the tail of its schedule."""
    every = params.preview_every_steps
    if not every:
        return
    if not spec.preview.enabled:
        raise InvalidArgument(
            f"preview_every_steps: model {spec.name!r} ({spec.pipeline}) has no latent "
            "previews (ModelInfo.previews is false); leave it unset or 0"
        )
    runs = denoising_steps(spec.pipeline, params.steps, params.strength)
    why = ""
    if runs != params.steps:
        why = (
            f" (this job runs {runs} denoising steps: {params.steps} steps at strength "
            f"{shown(params.strength)})"
        )
    _check_range("preview_every_steps", every, 0, runs, why)


def resolve_output(spec: ModelSpec, fields: RequestFields) -> tuple[str, int, int]:
    """(format, quality, fps) of the result: the request's choice checked against what the
    model allows, else the model's defaults; quality and fps are 0 where they do not apply."""
    allowed = spec.output_formats
    output_format = fields.output_format or spec.default_output_format
    if output_format not in allowed:
        raise InvalidArgument(
            f"output_format: {output_format!r} is not available for {spec.name} "
            f"({spec.modality}); allowed: {', '.join(allowed)}"
        )
    quality = fps = 0
    if fields.output_quality is not None and output_format not in LOSSY_IMAGE_FORMATS:
        raise InvalidArgument(
            f"output_quality: applies to {' and '.join(sorted(LOSSY_IMAGE_FORMATS))} images, "
            f"not {output_format}; leave it unset"
        )
    if output_format in LOSSY_IMAGE_FORMATS:
        quality = spec.output.quality if fields.output_quality is None else fields.output_quality
        _check_range("output_quality", quality, *QUALITY_RANGE)
    if fields.fps is not None and spec.modality != "video":
        raise InvalidArgument(f"fps: {spec.name} makes {spec.modality}, not video; leave it unset")
    if spec.modality == "video":
        fps = spec.output.fps if fields.fps is None else fields.fps
        _check_range("fps", fps, *fps_range(output_format), _for_format(output_format))
    return output_format, quality, fps


def check_output(spec: ModelSpec, params: GenerationParams) -> None:
    """InvalidArgument when the resolved output settings of `params` are not the model's: a
    format it does not offer, or a quality or frame rate out of range (0: the model's own).

    A worker checks each job with it: `resolve_output` produced these for the scheduler, but
    an encoder asked for a format of another modality would fail the job as an internal error.
    """
    output_format = params.output_format or spec.default_output_format
    if output_format not in spec.output_formats:
        raise InvalidArgument(
            f"output_format: {output_format!r} is not available for {spec.name} "
            f"({spec.modality}); allowed: {', '.join(spec.output_formats)}"
        )
    if params.output_quality:
        _check_range("output_quality", params.output_quality, *QUALITY_RANGE)
    if params.fps:
        _check_range("fps", params.fps, *fps_range(output_format), _for_format(output_format))


def _for_format(output_format: str) -> str:
    """Why a format's own frame-rate limit is lower, for the refusal's end."""
    if output_format != "gif":
        return ""
    return " for gif (its delays are hundredths of a second; browsers slow a faster one)"


def set_fields(fields: RequestFields) -> list[str]:
    """The model fields (MODEL_FIELDS) the caller set: an empty string counts as unset."""
    return [
        name
        for name in MODEL_FIELDS
        if getattr(fields, name) is not None and getattr(fields, name) != ""
    ]


def check_accepted(spec: ModelSpec, fields: RequestFields) -> None:
    """InvalidArgument naming the first field set that the model does not use: a field the
    pipeline would ignore is refused, never dropped."""
    for name in set_fields(fields):
        if name not in spec.accepted_fields:
            accepted = ", ".join(f for f in MODEL_FIELDS if f in spec.accepted_fields)
            raise InvalidArgument(
                f"{name}: model {spec.name!r} ({spec.pipeline}) does not use it; "
                f"leave it unset (it accepts {accepted})"
            )
