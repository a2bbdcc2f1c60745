"""OpenAI-compatible images: POST /v1/images/generations and /v1/images/edits.

Synchronous, as OpenAI's are: the answer comes when every one of the `n` jobs has ended.
`response_format` `b64_json` inlines the bytes; `url` submits the jobs with result_as_url
and points at where to fetch them (`context.result_url`: the bucket's presigned URL, or with
the local backend this gateway's result endpoint, which needs the same API key). Fields of
the mesh's own (steps, seed, negative_prompt, guidance_scale, priority) may ride along, as
the openai client's `extra_body`, the same on both routes; any other is refused, naming it.
A generation carries no input image, so a model that needs one is refused naming `model`.

OpenAI's fields that ask for something the mesh does not do (quality, style, background,
moderation, stream, partial_images, input_fidelity) are accepted at the values that change
nothing here, OpenAI's defaults among them, and refused (400, naming the field and the
values accepted) at any other: a request is never served as if a field it set were unsent.

The `n` jobs are admitted together, against the tenant's rate as `n` submissions, before any
is submitted: over the rate, none starts. Bodies are read after the API key is checked and
within `gateway.max_message_bytes` (413 above it).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from mediamesh.common.api.bounds import check_bounds
from mediamesh.common.errors import InvalidArgument
from mediamesh.common.limits import MAX_SEED
from mediamesh.gateway import metrics
from mediamesh.gateway.api.json_plane import (
    Followed,
    JsonObject,
    JsonPlane,
    request_from_form,
    request_from_json,
)
from mediamesh.gateway.core.tenancy import Caller
from mediamesh.gateway.http.bodies import read_form, read_model
from mediamesh.gateway.http.context import Authorization, base_url_of, context_of, result_url
from mediamesh.gateway.http.openai_common import (
    MAX_END_USER_CHARS,
    SIZE_NAMES,
    admitted,
    adopt_steps_alias,
    answered_or_cancelled,
    check_known_fields,
    checked_end_user,
    final_event,
    follow_all,
    image_seeds,
    log_end_user,
    mesh_fields,
    openai_input_advice,
    openai_names,
    parse_size,
    pick_model,
    result_bytes,
)
from mediamesh.gateway.http.openai_mask import converted_mask, probe_mask
from mediamesh.gateway.http.schemas import ErrorBody

router = APIRouter(tags=["openai"])
ResponseFormat = Literal["b64_json", "url"]
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (400, 401, 403, 404, 429, 503)
}
# The mesh's fields these routes set from OpenAI's, as their errors name them.
GENERATION_NAMES = {**SIZE_NAMES, "output_quality": "output_compression:"}
EDIT_NAMES = {**SIZE_NAMES, "mask_image": "mask:", "output_quality": "output_compression:"}
# OpenAI's fields of a request for something the mesh does not do: the values (as text) that
# ask for nothing beyond what it does anyway, and what a refusal of any other says.
NO_OP_VALUES: dict[str, tuple[tuple[str, ...], str]] = {
    # "auto" is gpt-image's default and "standard" dall-e-3's: both leave it to the model.
    "quality": (
        ("auto", "standard"),
        "this gateway renders at the model's own quality; send auto or standard, or leave it unset",
    ),
    # A dall-e-3 field (default vivid there) that none of the mesh's models takes.
    "style": ((), "the mesh's image models take no style; leave it unset"),
    # The workers encode RGB images (worker/models/encode.py): every result is opaque.
    "background": (
        ("auto", "opaque"),
        "results are opaque images without an alpha channel; send auto or opaque, or leave "
        "it unset",
    ),
    # The mesh runs no content moderation, so either of OpenAI's levels is what it does.
    "moderation": (("auto", "low"), "send auto or low, or leave it unset"),
    "stream": (
        ("false",),
        "images are answered whole, not streamed; send false or leave it unset",
    ),
    "partial_images": (
        ("0",),
        "images are answered whole, without partial images; send 0 or leave it unset",
    ),
    # "high" asks to keep more of the input image's detail than the model does by itself.
    "input_fidelity": (
        ("low",),
        "edits keep as much of the input image as the model does by itself; send low or "
        "leave it unset",
    ),
}
GENERATION_FIELDS = (
    "prompt", "model", "n", "size", "response_format", "output_format", "output_compression",
    "user", *(name for name in NO_OP_VALUES if name != "input_fidelity"),
)  # fmt: skip
# The mesh's own fields both routes take, and no other: the rest of /v1/jobs' would be
# ignored (preview_every_steps, result_as_url: the answer is the images, whole) or wrong for
# n jobs (one idempotency_key would answer the first job n times).
# `num_inference_steps`, vLLM-Omni's name for steps, is taken too (adopt_steps_alias).
IMAGE_MESH_FIELDS = ("steps", "seed", "negative_prompt", "guidance_scale", "priority", "adapters")
# How an edit sends each input image the mesh's errors advise sending as bytes or an id.
EDIT_PARTS = {"image": "image", "mask_image": "mask"}
EDIT_FIELDS = (
    "image", "mask", "prompt", "model", "n", "size", "response_format", "output_format",
    "output_compression", "user", *NO_OP_VALUES,
)  # fmt: skip


class ImageGeneration(BaseModel):
    """OpenAI's image generation request, plus the mesh's optional fields."""

    # Any other field is refused by `check_known_fields`, in the words edits use.
    # Strict: JSON's own types only, as /v1/jobs takes them (a lax model reads `"seed": true`
    # as seed 1 and `"n": "2"` as 2).
    model_config = ConfigDict(extra="allow", strict=True)

    prompt: str
    model: str | None = Field(None, description="A mesh model; default: the first image model")
    n: int | None = Field(1, ge=1, le=10, description="Images to make; null: 1")
    size: str | None = Field(None, description="WIDTHxHEIGHT, or auto (the model's default)")
    # OpenAI's spec allows null, which is its default.
    response_format: ResponseFormat | None = Field("b64_json", description="null: b64_json")
    output_format: Literal["png", "jpeg", "webp"] | None = None
    # 1, not OpenAI's 0: the encoders' lowest quality; 0 would be refused past the schema.
    output_compression: int | None = Field(
        None, ge=1, le=100, description="jpeg and webp quality, 1..100; default: the model's"
    )
    user: str | None = Field(
        None,
        description="Your end user's id: logged by the gateway with the jobs it made",
        max_length=MAX_END_USER_CHARS,
    )
    quality: str | None = Field(None, description="auto or standard: the model's own")
    style: str | None = Field(None, description="Not offered: leave unset")
    background: str | None = Field(None, description="auto or opaque: results are opaque")
    moderation: str | None = Field(None, description="auto or low: the mesh moderates nothing")
    stream: bool | None = Field(None, description="false: images are answered whole")
    partial_images: int | None = Field(None, description="0: none are sent")
    steps: int | None = None
    seed: int | None = None
    negative_prompt: str | None = None
    guidance_scale: float | None = None
    priority: str | None = None


class ImageData(BaseModel):
    """One generated image."""

    b64_json: str | None = None
    url: str | None = None


class ImagesResponse(BaseModel):
    """OpenAI's images answer."""

    created: int
    data: list[ImageData]
    output_format: str | None = None
    size: str | None = None


@router.post(
    "/v1/images/generations",
    response_model=ImagesResponse,
    response_model_exclude_none=True,
    responses={**ERRORS, 413: {"model": ErrorBody}},
    summary="Generate images (OpenAI-compatible)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ImageGeneration.model_json_schema()}},
        }
    },
)
async def generate_images(request: Request, authorization: Authorization = None) -> JsonObject:
    """Runs `n` jobs of the prompt with an image model and answers with their images."""
    context = context_of(request)
    plane = context.plane
    caller = plane.caller(authorization, request.headers.get("traceparent"))
    with metrics.counting_refusals() as asked:
        body = await read_model(request, ImageGeneration, context.max_body_bytes)
        extra = {"steps": body.steps, **(body.model_extra or {})}
        step_names = adopt_steps_alias(extra)
        steps = extra.pop("steps")
        check_known_fields(extra, "image generations", GENERATION_FIELDS, IMAGE_MESH_FIELDS)
        declared = ImageGeneration.model_fields
        check_no_ops({name: getattr(body, name) for name in NO_OP_VALUES if name in declared})
        count = 1 if body.n is None else body.n
        user = checked_end_user(body.user)
        model = await pick_model(plane, caller, body.model, "image")
        asked.queue, asked.jobs = "image", count
        await _check_needs_no_input(plane, model)
        response_format: ResponseFormat = body.response_format or "b64_json"
        fields = {
            "model": model["name"],
            "prompt": body.prompt,
            **parse_size(body.size, model),
            "output_format": body.output_format,
            "output_quality": body.output_compression,
            **mesh_fields(
                {
                    "steps": steps,
                    "negative_prompt": body.negative_prompt,
                    "guidance_scale": body.guidance_scale,
                    "priority": body.priority,
                    # LoRA adapters by name, as /v1/jobs takes them.
                    "adapters": extra.get("adapters"),
                }
            ),
        }
        requests = [
            request_from_json(mesh_fields({**fields, "seed": seed}))
            for seed in image_seeds(body.seed, count)
        ]
        for generate in requests:
            generate.result_as_url = _as_url(response_format)
    with (
        openai_names({**GENERATION_NAMES, **step_names}),
        admitted(context.plane.tenancy, caller, model, body.priority, count) as paid,
    ):
        jobs = await follow_all(plane, caller, (plane.follow(r, paid) for r in requests))
    log_end_user("/v1/images/generations", caller, user, [job.job_id for job in jobs])
    images = _images(plane, jobs, caller, response_format, request)
    # A job's own refusal (its worker's) names a field as the client sent it too.
    with openai_names({**GENERATION_NAMES, **step_names}):
        answer = await answered_or_cancelled(request, plane, caller, jobs, images)
    return {**answer, "size": _made_size(fields, model)}


@router.post(
    "/v1/images/edits",
    response_model=ImagesResponse,
    response_model_exclude_none=True,
    responses={**ERRORS, 413: {"model": ErrorBody}},
    summary="Edit an image (OpenAI-compatible)",
    openapi_extra={
        "requestBody": {
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["image", "prompt"],
                        "properties": {
                            "image": {"type": "string", "format": "binary"},
                            "mask": {"type": "string", "format": "binary"},
                            "prompt": {"type": "string"},
                            "model": {"type": "string"},
                            "n": {"type": "integer"},
                            "size": {"type": "string"},
                            "response_format": {"type": "string", "enum": ["b64_json", "url"]},
                        },
                    }
                }
            }
        }
    },
)
async def edit_images(request: Request, authorization: Authorization = None) -> JsonObject:
    """Runs `n` jobs of the prompt on the uploaded image (and mask) with an image model that
    takes them (by default the first that does and needs no other input); 400 for a model
    that does not, or for more than one image."""
    context = context_of(request)
    plane = context.plane
    caller = plane.caller(authorization, request.headers.get("traceparent"))
    with metrics.counting_refusals() as asked:
        form, files = await read_form(request, context.max_body_bytes, {"image[]": "image"})
        image = files.get("image")
        prompt = form.pop("prompt", None)
        if image is None:
            raise InvalidArgument("image: required, as a file part")
        if "mask" in form:
            # Not a field of the mesh's job (that is mask_image): the job would name that.
            raise InvalidArgument(
                "mask: send it as a file part (a PNG with transparency), not text"
            )
        if not prompt:
            raise InvalidArgument("prompt: required")
        inputs = {"image": "image", "mask_image": "mask"} if "mask" in files else {"image": "image"}
        model = await pick_model(plane, caller, form.pop("model", None), "image", inputs)
        asked.queue = "image"
        requested_format = form.pop("response_format", "b64_json")
        if requested_format not in ("b64_json", "url"):
            raise InvalidArgument(
                f"response_format: {requested_format[:32]!r}; use b64_json or url"
            )
        response_format: ResponseFormat = "url" if requested_format == "url" else "b64_json"
        check_no_ops({name: form.pop(name, None) for name in NO_OP_VALUES})
        n = asked.jobs = _count(form.pop("n", "1"))
        # The mesh's width and height are no fields of edits (check_known_fields names them).
        size_text = form.pop("size", None)
        size = parse_size(size_text, model)
        user = checked_end_user(form.pop("user", None))
        seeds = image_seeds(_seed(form.pop("seed", None)), n)
        step_names = adopt_steps_alias(form)
        unknown = sorted(set(files) - {"image", "mask"})
        if unknown:
            raise InvalidArgument(
                f"{unknown[0]}: not a file field of image edits; only image, mask"
            )
        # Before output_compression becomes the mesh's output_quality: one sent by that name
        # is refused, as on generations, rather than overridden by the other.
        check_known_fields(form, "image edits", EDIT_FIELDS, IMAGE_MESH_FIELDS)
        if "output_compression" in form:
            form["output_quality"] = form.pop("output_compression")
        fields = {"model": model["name"], "prompt": prompt, **{k: str(v) for k, v in size.items()}}
        mask = files.get("mask")
        max_pixels = plane.spec(model["name"]).limits.max_input_pixels
        if mask is not None:
            # Its header against the model's limit now; its pixels only once admitted.
            await probe_mask(mask, max_pixels)
        with openai_names({**EDIT_NAMES, **step_names}), openai_input_advice(EDIT_PARTS):
            requests = []
            for seed in seeds:
                seeded = {} if seed is None else {"seed": str(seed)}
                requests.append(request_from_form({**form, **fields, **seeded}, {"image": image}))
                requests[-1].result_as_url = _as_url(response_format)
    with (
        openai_names({**EDIT_NAMES, **step_names}),
        openai_input_advice(EDIT_PARTS),
        admitted(context.plane.tenancy, caller, model, form.get("priority"), n) as paid,
    ):
        if mask is not None:
            with metrics.counting_refusals("image", n):
                converted = await converted_mask(mask, max_pixels)
                for generate in requests:
                    generate.mask_image = converted
                    check_bounds(generate)
        jobs = await follow_all(plane, caller, (plane.follow(r, paid) for r in requests))
    log_end_user("/v1/images/edits", caller, user, [job.job_id for job in jobs])
    images = _images(plane, jobs, caller, response_format, request)
    with openai_names({**EDIT_NAMES, **step_names}), openai_input_advice(EDIT_PARTS):
        answer = await answered_or_cancelled(request, plane, caller, jobs, images)
    # The size made when a size was asked for; otherwise the input image's, which the
    # gateway has not decoded, so none is said.
    return {**answer, "size": _made_size(size, model) if size else None}


def _made_size(fields: Mapping[str, object], model: JsonObject) -> str:
    """The images' size as OpenAI's `size` gives it, WIDTHxHEIGHT: the one asked for, written
    plainly (`064x064` is 64x64), or the model's default for auto or none."""
    limits = model["limits"]
    width = fields.get("width", limits["default_width"])
    height = fields.get("height", limits["default_height"])
    return f"{width}x{height}"


async def _check_needs_no_input(plane: JsonPlane, model: JsonObject) -> None:
    """InvalidArgument naming `model` when it needs an input image: a generation sends none,
    and the mesh's advice (an image_id) names a field these routes do not take."""
    needed = model.get("inputs") or []
    if not needed:
        return
    models = await plane.recent_models()
    takers = [m["name"] for m in models if m["modality"] == "image" and not m.get("inputs")]
    raise InvalidArgument(
        f"model: {model['name']!r} ({model['pipeline']}) needs an input "
        f"{' and '.join(needed)}, which a generation does not send; send the image to "
        f"/v1/images/edits, or generate with an image model that needs none: "
        f"{', '.join(takers) or 'none'}"
    )


def check_no_ops(values: dict[str, object]) -> None:
    """InvalidArgument naming the first of OpenAI's `NO_OP_VALUES` fields set to a value the
    mesh cannot honour; None (unset) and the values that change nothing pass. JSON values
    are compared as form text would carry them (false, 0)."""
    for name, value in values.items():
        if value is None:
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if name == "stream":
            text = text.lower()
        accepted, reason = NO_OP_VALUES[name]
        if text not in accepted:
            raise InvalidArgument(f"{name}: {text[:32]!r} is not offered; {reason}")


def _as_url(response_format: ResponseFormat) -> bool:
    """Whether the jobs ask for their results as URLs. OpenAI clients fetch a `url` without
    the API key, so with object storage it must be the bucket's presigned URL whatever the
    result's size; the local backend answers with a reference and the gateway's endpoint
    serves it (and no inline bytes travel that the answer would not use)."""
    return response_format == "url"


def _count(text: str) -> int:
    # The length first: Python refuses int() of thousands of digits.
    if not (text.isascii() and text.isdigit() and len(text) <= 2) or not 1 <= int(text) <= 10:
        raise InvalidArgument(f"n: {text[:16]!r}; allowed 1..10")
    return int(text)


def _seed(text: str | None) -> int | None:
    """A form's seed as a number, so that each image's can be derived from it."""
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()):
        raise InvalidArgument(f"seed: {text[:32]!r} is not a whole number >= 0")
    if len(text.lstrip("0")) > len(str(MAX_SEED)) or int(text) > MAX_SEED:
        raise InvalidArgument(f"seed: {text[:32]!r} out of range; allowed 0..{MAX_SEED}")
    return int(text)


async def _images(
    plane: JsonPlane,
    jobs: list[Followed],
    caller: Caller,
    response_format: ResponseFormat,
    request: Request,
) -> JsonObject:
    """The images answer: each job's image, and their format as OpenAI names it."""
    data, formats = [], set()
    for job in jobs:
        image, mime_type = await _image(plane, job, caller, response_format, request)
        data.append(image)
        formats.add(mime_type.removeprefix("image/"))
    # One request's images share their format; should they not, none is claimed for all.
    output_format = formats.pop() if len(formats) == 1 else None
    return {"created": int(time.time()), "data": data, "output_format": output_format}


async def _image(
    plane: JsonPlane,
    job: Followed,
    caller: Caller,
    response_format: ResponseFormat,
    request: Request,
) -> tuple[JsonObject, str]:
    """One job's image as the answer carries it, and its MIME type."""
    job_id = job.job_id
    event, inline = await final_event(plane, job, caller)
    mime_type = str(event.get("mime_type", ""))
    if response_format == "url":
        # OpenAI's clients open the url without a key: a gateway with keys signs it.
        links = context_of(request).result_links
        signed = links.query(job_id, caller.tenant) if links is not None else None
        url = result_url(base_url_of(request), job_id, event.get("url"), signed)
        return {"url": url}, mime_type
    # Bytes small enough to come with the job's end need no download of their own.
    data = inline if inline is not None else await result_bytes(plane, job_id, caller)
    return {"b64_json": base64.b64encode(data).decode()}, mime_type
