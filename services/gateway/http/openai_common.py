"""What the OpenAI-compatible routes share: sizes, model choice, the names errors give the
client's fields, admitting and submitting a request's jobs together, waiting for a job's end."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import unicodedata
from collections.abc import Awaitable, Iterable, Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from starlette.requests import Request

from mediamesh.common.errors import InvalidArgument, MeshError, PermissionDenied, StatusCode
from mediamesh.common.input_images import how_to_send
from mediamesh.common.limits import MAX_SEED
from mediamesh.common.params import parse_priority
from mediamesh.gateway import metrics
from mediamesh.gateway.api.json_plane import (
    Followed,
    JsonObject,
    JsonPlane,
    generate_request_schema,
)
from mediamesh.gateway.core.tenancy import Caller, Tenancy
from mediamesh.gateway.http.disconnects import unless_client_leaves
from mediamesh.gateway.http.errors import renamed_fields

log = logging.getLogger("mediamesh.gateway.openai")
T = TypeVar("T")
_SIZE = re.compile(r"(\d+)x(\d+)", re.ASCII)
# OpenAI sets no bound on `user`; one here keeps a caller's string out of the logs' bulk.
MAX_END_USER_CHARS = 256
# What `user` may not hold: control characters (C0, DEL, C1) and the line and paragraph
# separators, which some log readers take for line breaks.
_CONTROLS = frozenset({"Cc", "Zl", "Zp"})
# The mesh's own job fields, which may ride beside OpenAI's (the openai client's extra_body).
_MESH_FIELDS = frozenset(generate_request_schema()["properties"])
# vLLM-Omni's name (SGLang's too) for a job's `steps`, which their clients send.
STEPS_ALIAS = "num_inference_steps"
# The message heads of the mesh's fields that OpenAI's `size` sets, for `openai_names`.
SIZE_NAMES = {"width": "size: width", "height": "size: height"}


def check_size_alone(size: str | None, mesh_fields: Mapping[str, object]) -> None:
    """InvalidArgument when OpenAI's `size` comes with the mesh's own `width` or `height`:
    one would override the other without a word."""
    both = [name for name in ("width", "height") if mesh_fields.get(name) is not None]
    if size is not None and both:
        raise InvalidArgument(f"size: set size or {' and '.join(both)}, not both")


def parse_size(size: str | None, model: JsonObject) -> dict[str, int]:
    """`WxH` as width and height within `model`'s limits (its ModelInfo fields); nothing for
    None or "auto" (the model's default size)."""
    if size is None or size == "auto":
        return {}
    match = _SIZE.fullmatch(size)
    if match is None:
        raise InvalidArgument(f"size: {size[:32]!r} is not WIDTHxHEIGHT (e.g. 512x512) or auto")
    if "width" not in model.get("accepted_fields", ()):
        # Image-to-image pipelines such as SDXL's make the input image's size.
        raise InvalidArgument(
            f"size: model {model['name']!r} ({model['pipeline']}) takes no size; leave it "
            "unset or auto"
        )
    limits = model["limits"]
    low, max_width, max_height = (
        limits["size_multiple"],
        limits["max_width"],
        limits["max_height"],
    )
    for digits, high in ((match[1], max_width), (match[2], max_height)):
        # Python refuses int() of thousands of digits; more digits than the limit's is over it.
        if len(digits.lstrip("0")) > len(str(high)) or not low <= int(digits) <= high:
            raise InvalidArgument(
                f"size: {size[:32]!r} is out of range for {model['name']}; allowed width "
                f"{low}..{max_width} and height {low}..{max_height}"
            )
    return {"width": int(match[1]), "height": int(match[2])}


async def pick_model(
    plane: JsonPlane,
    caller: Caller,
    name: str | None,
    modality: str,
    inputs: Mapping[str, str] | None = None,
) -> JsonObject:
    """The named model (its ModelInfo fields), or the first ready model of `modality` that
    takes `inputs`, needs no input besides them, and that `caller`'s tenant may use (ready
    as of the last second: `JsonPlane.recent_models`); `inputs` maps an input the request
    carries ("image", "mask_image") to the OpenAI field that carries it, which an error
    about it names. Only when every model that takes `inputs` needs another is the first of
    those chosen, so that the refusal names the input missing ("mask: required")."""
    needed = inputs or {}
    models = await plane.recent_models()
    served = [m for m in models if m["modality"] == modality]
    if name:
        for model in models:
            if model["name"] == name:
                _check_model(model, modality, needed, served)
                return model
        known = ", ".join(m["name"] for m in models)
        raise MeshError(f"model: {name!r} is not served; known: {known}", code=StatusCode.NOT_FOUND)
    fitting = [m for m in served if _takes(m, needed)]
    taking = f" that takes {' and '.join(needed)} input" if needed else ""
    if not fitting:
        raise InvalidArgument(f"model: required; this mesh serves no {modality} model{taking}")
    allowed = caller.quota.allowed_models
    if allowed:
        # The default is one the caller may use: the first served could be refused to it.
        fitting = [m for m in fitting if m["name"] in allowed]
        if not fitting:
            raise PermissionDenied(
                f"model: required; tenant {caller.tenant!r} may use no {modality} "
                f"model{taking} (it may use {', '.join(sorted(allowed))})"
            )
    # A model that needs an input the request lacks (an inpainting model's mask, for an
    # edit without one) would only refuse it, though another could serve it.
    complete = [m for m in fitting if set(m.get("inputs", [])) <= set(needed)] or fitting
    ready = [m for m in complete if m.get("ready")] or complete
    return ready[0]


def _check_model(
    model: JsonObject, modality: str, inputs: Mapping[str, str], served: list[JsonObject]
) -> None:
    """InvalidArgument unless `model` makes `modality` and takes every one of `inputs`."""
    name = model["name"]
    if model["modality"] != modality:
        names = ", ".join(m["name"] for m in served) or "none"
        raise InvalidArgument(
            f"model: {name!r} makes {model['modality']}; this route serves the {modality} "
            f"models: {names}"
        )
    for needed, field in inputs.items():
        if needed not in model.get("inputs", []):
            takers = ", ".join(m["name"] for m in served if _takes(m, {needed: field}))
            raise InvalidArgument(
                f"{field}: model {name!r} takes no {needed} input; {modality} models that "
                f"do: {takers or 'none'}"
            )


def _takes(model: JsonObject, inputs: Mapping[str, str]) -> bool:
    return all(needed in model.get("inputs", []) for needed in inputs)


def adopt_steps_alias(fields: MutableMapping[str, Any]) -> dict[str, str]:
    """`num_inference_steps` in `fields` taken as the mesh's `steps`, and the error name that
    goes with it for `openai_names` (none when it was not sent); InvalidArgument when both
    are set to different values."""
    if STEPS_ALIAS not in fields:
        return {}
    value = fields.pop(STEPS_ALIAS)
    steps = fields.get("steps")
    if steps is not None and value is not None and steps != value:
        raise InvalidArgument(
            f"{STEPS_ALIAS}: {str(value)[:16]!r} beside steps {str(steps)[:16]!r}; they name "
            "the same setting, so send one of them"
        )
    if value is not None:
        fields["steps"] = value
    return {"steps": f"{STEPS_ALIAS}:"}


def openai_names(heads: Mapping[str, str]) -> AbstractContextManager[None]:
    """Errors raised inside name the OpenAI field the client sent, not the mesh's
    (`errors.renamed_fields`), e.g. "mask_image" as "mask:"."""
    return renamed_fields(heads)


@contextlib.contextmanager
def openai_input_advice(parts: Mapping[str, str]) -> Iterator[None]:
    """Errors raised inside that advise sending an input image as the native API does (its
    bytes or an Upload's id in `image_id`, `mask_image_id`) advise the form's own file part
    instead: `parts` maps the input ("mask_image") to it ("mask"). OpenAI's routes take no
    ids, so the native advice named a field the client cannot send."""
    try:
        yield
    except MeshError as error:
        for name, part in parts.items():
            advice = f"send an image as the form's {part!r} file part"
            error.message = error.message.replace(how_to_send(name), advice)
        error.args = (error.message,)
        raise


@contextlib.contextmanager
def admitted(
    tenancy: Tenancy, caller: Caller, model: JsonObject, priority: str | None, jobs: int
) -> Iterator[Caller]:
    """`jobs` submissions of `model` at `priority` admitted as one (`Tenancy.admitted`): the
    caller to submit them as, so that a request over the tenant's rate starts none of them,
    and one of more jobs than the tenant's burst is refused naming `n`, which set them. A
    refusal counts each job asked for, as the native face counts its refusals."""
    with contextlib.ExitStack() as admission:
        try:
            paid = admission.enter_context(
                tenancy.admitted(caller, model["name"], parse_priority(priority or ""), jobs, "n")
            )
        except MeshError as exc:
            metrics.count_refused(exc, str(model.get("modality") or metrics.UNKNOWN_QUEUE), jobs)
            raise
        yield paid


async def follow_all(
    plane: JsonPlane, caller: Caller, submissions: Iterable[Awaitable[Followed]]
) -> list[Followed]:
    """`submissions` made one after another (so that their jobs can share a batch), each
    followed over its own exchange with the scheduler. If one fails (or the client leaves),
    those made before it are cancelled: the answer is an error that names none of them, so
    no one could fetch what they make."""
    followed: list[Followed] = []
    try:
        for submission in submissions:
            followed.append(await submission)
    except BaseException:
        await asyncio.shield(_cancel_all(plane, caller, followed))
        raise
    return followed


async def answered_or_cancelled(
    request: Request, plane: JsonPlane, caller: Caller, jobs: list[Followed], answer: Awaitable[T]
) -> T:
    """`answer`, built from `jobs`' results; if the client leaves first, or building it
    fails, the jobs are cancelled. Their ids were never given to the client, so nobody could
    fetch what they went on to make (and the openai client's retries would stack copies)."""
    try:
        return await unless_client_leaves(request, answer)
    except BaseException:
        await asyncio.shield(_cancel_all(plane, caller, jobs))
        raise


def image_seeds(seed: int | None, n: int) -> list[int | None]:
    """The seed of each of `n` images: `seed + index`, so that they differ, as one would ask
    of a batch; none when the request leaves the seed to the mesh."""
    if seed is None:
        return [None] * n
    if seed + n - 1 > MAX_SEED and seed <= MAX_SEED:
        raise InvalidArgument(
            f"seed: {seed} out of range; image i of n uses seed + i, so with n={n} at most "
            f"{MAX_SEED - n + 1}"
        )
    return [seed + index for index in range(n)]


async def _cancel_all(plane: JsonPlane, caller: Caller, jobs: list[Followed]) -> None:
    for job in jobs:
        # Closing cancels a job on the link; one on a call of its own is cancelled by its id.
        await job.close()
        # Best effort: the error that got here is the one the client is owed.
        with contextlib.suppress(MeshError):
            await plane.cancel(job.job_id, caller)


async def final_event(
    plane: JsonPlane, job: Followed, caller: Caller
) -> tuple[JsonObject, bytes | None]:
    """The job's result event, and its bytes when they came with it; its error (with the
    job's code) raises MeshError."""
    job_id = job.job_id
    event, inline = await plane.followed_outcome(job, caller)
    if event["kind"] == "result":
        return event, inline
    if event["kind"] == "error":
        code = StatusCode.parse(event["code"])
        raise MeshError(event["message"] or f"job {job_id} failed", code=code)
    raise MeshError(f"job {job_id}: its event stream ended early", code=StatusCode.UNAVAILABLE)


async def result_bytes(plane: JsonPlane, job_id: str, caller: Caller) -> bytes:
    """The whole result of a finished job."""
    return b"".join([chunk.data async for chunk in plane.download(job_id, caller)])


def checked_end_user(user: str | None) -> str | None:
    """OpenAI's `user` (the caller's own end user), within its bound and free of control
    characters (it is logged: a line break in it would forge a log line); 400 otherwise."""
    if user is None:
        return None
    if len(user) > MAX_END_USER_CHARS:
        raise InvalidArgument(f"user: {len(user)} characters; at most {MAX_END_USER_CHARS}")
    bad = next((i for i, c in enumerate(user) if unicodedata.category(c) in _CONTROLS), None)
    if bad is not None:
        raise InvalidArgument(
            f"user: a control character (U+{ord(user[bad]):04X}) at position {bad + 1}; "
            "send an id without control characters or line breaks"
        )
    return user or None


def log_end_user(route: str, caller: Caller, user: str | None, jobs: list[str]) -> None:
    """One line tying the jobs an OpenAI request made to the end user it names: what OpenAI
    has the field for (tracing abuse to a product's user), here for the operator's logs."""
    if user:
        fields = {"route": route, "tenant": caller.tenant, "end_user": user, "jobs": jobs}
        log.info("openai request for an end user", extra={"fields": fields})


def mesh_fields(extra: dict[str, Any]) -> JsonObject:
    """The mesh's own GenerateRequest fields a client passed beside OpenAI's (extra_body)."""
    return {k: v for k, v in extra.items() if v is not None}


def check_known_fields(
    names: Iterable[str],
    route: str,
    openai_fields: Iterable[str],
    mesh_names: Iterable[str] | None = None,
) -> None:
    """InvalidArgument naming the first of `names` that is neither one of `openai_fields`
    nor one of the mesh's own job fields the route takes (`mesh_names`; None: any of those
    /v1/jobs takes), so that a misspelt or unsupported field is refused rather than ignored,
    in words that name no internal type."""
    mesh_allowed = _MESH_FIELDS if mesh_names is None else frozenset(mesh_names)
    openai_allowed = frozenset(openai_fields)
    mesh = "the mesh's own job fields (those of /v1/jobs, e.g. steps, seed)"
    if mesh_names is not None:
        mesh = f"the mesh's own {', '.join(sorted(mesh_allowed))}"
        if "steps" in mesh_allowed:
            # Taken before this check (adopt_steps_alias), so no allowed name lists it.
            mesh += " (steps also as num_inference_steps)"
    for name in sorted(names):
        if name not in mesh_allowed and name not in openai_allowed:
            raise InvalidArgument(
                f"{name[:64]}: not a field of {route}; it takes OpenAI's "
                f"{', '.join(sorted(openai_allowed))}, and {mesh}"
            )
