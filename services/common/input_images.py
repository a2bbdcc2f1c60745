"""Checking a request's input images before they cost memory, and resolving its strength.

Pure: the gateway and the scheduler call it on the bytes a caller sent. An image is judged
from its header (Pillow's `Image.open` reads only that): its format, its size, and so its
pixel count, which is held to the model's `limits.max_input_pixels` before a single pixel
is decoded. A decompression bomb (a small file declaring a huge canvas) is therefore
refused by what it declares. `decode_image` then decodes one that passed, bounded by that
limit, to find bytes that are broken past their header.

The bytes are held to the pixels too (`max_encoded_bytes`): no honest encoding of a canvas
takes more than its raw pixels at the deepest format (8 bytes a pixel: 16-bit RGBA PNG), a
filter byte a row and some metadata, so a small image padded with a huge ancillary chunk, EXIF
segment or trailing bytes is refused before anything stores it.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import math
import re
from collections.abc import Collection
from dataclasses import replace

from PIL import Image, UnidentifiedImageError

from mediamesh.common.denoising_steps import denoising_steps
from mediamesh.common.errors import InvalidArgument
from mediamesh.common.generation import GenerationParams, InputImage
from mediamesh.common.registry import ModelSpec
from mediamesh.common.shown_numbers import shown

# Pillow format name -> MIME type: the formats an input may have.
INPUT_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}
# Request field holding each input's upload id instead of bytes.
ID_FIELDS = {"image": "image_id", "mask_image": "mask_image_id"}
# Leading bytes of each input format: enough to tell an upload's format without decoding it.
_SIGNATURES = {
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"\xff\xd8\xff": "image/jpeg",
}
# Bytes `sniffed_mime` needs to tell every format apart (WebP's "WEBP" ends at byte 12).
SNIFF_BYTES = 12
# The most bytes an input may take: raw pixels at their deepest (16-bit RGBA), a PNG filter
# byte a row, and room for metadata (ICC profiles, EXIF) and the encoding's own overhead.
MAX_BYTES_PER_PIXEL = 8
METADATA_ALLOWANCE_BYTES = 2**20
# Pillow puts the repr of its file object in some messages; a caller has no use for it.
_OBJECT_REPR = re.compile(r"\s*<[^<>]*\bat 0x[0-9a-fA-F]+>")


def input_field(name: str, input_id: str) -> str:
    """The request field that carried input `name`: its upload id field when the caller named
    an upload, else the bytes field. Errors about the input name this field, the one the
    caller set, even once the scheduler has read the upload's bytes."""
    return ID_FIELDS[name] if input_id else name


def sniffed_mime(data: bytes) -> str | None:
    """The input format's MIME type by the leading bytes of `data` (at least SNIFF_BYTES of
    them for WebP); None for bytes that start no PNG, JPEG or WebP file."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((mime for magic, mime in _SIGNATURES.items() if data.startswith(magic)), None)


def check_upload_mime(mime_type: str) -> None:
    """InvalidArgument naming `mime_type` unless it is an input format's MIME type, or empty
    (the format is then taken from the bytes)."""
    if mime_type and mime_type not in INPUT_FORMATS.values():
        allowed = ", ".join(INPUT_FORMATS.values())
        raise InvalidArgument(
            f"mime_type: {mime_type[:64]!r} is not an input format; use one of {allowed}, "
            "or leave it empty to have it read from the bytes"
        )


def check_later_chunk(index: int, sha256: str, mime_type: str, first: tuple[str, str]) -> None:
    """InvalidArgument naming `sha256` or `mime_type` when chunk `index` (0 is the first) of
    an upload sets it to other than the first chunk's (`first`: its sha256 and mime_type).
    They describe the whole upload and are read from the first chunk; a later chunk may
    leave them empty or repeat them, but a different value would be ignored without a word.
    """
    for field, value, declared in (
        ("sha256", sha256, first[0]),
        ("mime_type", mime_type, first[1]),
    ):
        if value and value != declared:
            raise InvalidArgument(
                f"{field}: chunk {index + 1} sets {value[:64]!r}, the first chunk "
                f"{declared[:64]!r}; it describes the whole upload, so set it on the first "
                "chunk and leave it empty (or the same) on the others"
            )


def max_encoded_bytes(width: int, height: int) -> int:
    """The most bytes an input image of `width` x `height` pixels may take."""
    return MAX_BYTES_PER_PIXEL * width * height + height + METADATA_ALLOWANCE_BYTES


def how_to_send(name: str) -> str:
    """The native API's ways to send input `name`; a face without them (KServe, whose inputs
    are tensors) replaces this part of a refusal with its own."""
    return f"send the bytes or an Upload's input_id in {ID_FIELDS[name]}"


def probe_image(field: str, data: bytes, max_pixels: int) -> InputImage:
    """The image's identity and size from its header; InvalidArgument naming `field` and the
    limit for bytes that are no image, a format other than PNG, JPEG or WebP, more pixels
    than `max_pixels`, or more bytes than `max_encoded_bytes` for its pixels. Nothing is
    decoded."""
    if not data:
        raise InvalidArgument(f"{field}: empty; send PNG, JPEG or WebP bytes")
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if header_orientation(image) in _SWAPS_SIDES:
                width, height = height, width  # the size it is shown at, and decoded to
            kind = image.format or "unknown"
            _check_pixels(field, width, height, max_pixels)
            _check_bytes(field, len(data), width, height)
            if kind not in INPUT_FORMATS:
                raise InvalidArgument(
                    f"{field}: {kind} images are not supported; send PNG, JPEG or WebP"
                )
            # Reads the rest of the file without decoding pixels (PNG: every chunk's CRC).
            image.verify()
    except Image.DecompressionBombError:
        # Pillow refuses canvases far beyond its own limit while still reading the header.
        raise InvalidArgument(
            f"{field}: declares more pixels than the limit of {max_pixels} pixels"
        ) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise InvalidArgument(
            f"{field}: cannot be decoded as PNG, JPEG or WebP ({_undecodable(exc, data)})"
        ) from None
    return InputImage(
        sha256=hashlib.sha256(data).hexdigest(),
        width=width,
        height=height,
        mime_type=INPUT_FORMATS[kind],
    )


def decode_image(field: str, data: bytes, max_pixels: int) -> Image.Image:
    """The decoded image, after `probe_image`'s checks; InvalidArgument naming `field` for
    bytes whose pixel data is broken (a truncated or corrupt file with a good header)."""
    probe_image(field, data, max_pixels)
    try:
        opened = Image.open(io.BytesIO(data))
        orientation = header_orientation(opened)
        opened.load()
    except Exception as exc:
        raise InvalidArgument(f"{field}: cannot be decoded ({_undecodable(exc, data)})") from None
    image: Image.Image = opened
    if image.mode in _SIXTEEN_BIT_GRAY:
        transparent = image.info.get("transparency")
        image = _eight_bit_gray(image)
        if isinstance(transparent, int):
            # Scaled as the pixels were, so the picture keeps its transparency; at 8 bits
            # neighbouring values share it, so an OpenAI edit's mask, which must mark only
            # the exact value, is read from the 16-bit samples instead (openai_mask).
            image.info["transparency"] = (min(transparent, 65535) + 128) // 257
    return upright(image, orientation)


def upright(picture: Image.Image, orientation: int) -> Image.Image:
    """`picture` turned as an EXIF `orientation` says viewers show it (as decode_image
    shows every input), so that a picture read from the same pixels lines up with it."""
    turn = _TURNS.get(orientation)
    return picture if turn is None else picture.transpose(turn)


# EXIF orientation -> the transpose that shows the picture upright, as viewers apply it
# (a phone stores a portrait photo as landscape pixels and says so here).
_TURNS = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_SWAPS_SIDES = {5, 6, 7, 8}
_ORIENTATION_TAG = 0x0112
# Pillow's modes for a 16-bit grayscale PNG; converting them to "L" or "RGB" clips every
# value above 255 to white instead of scaling it.
_SIXTEEN_BIT_GRAY = {"I;16", "I;16B", "I;16L", "I;16N", "I"}


def header_orientation(image: Image.Image) -> int:
    """The EXIF orientation that `Image.open` read with the header (1 when none). Only what
    came with the header: Pillow reads a PNG's later eXIf chunk by decoding the pixels, which
    the size check must come before, so the probe and the decoder both ignore that one."""
    raw = image.info.get("exif")
    if not raw:
        return 1
    exif = Image.Exif()
    try:
        exif.load(raw)
        value = exif.get(_ORIENTATION_TAG, 1)
    except Exception:
        return 1  # a broken EXIF block is metadata lost, not a broken picture
    return value if isinstance(value, int) and value in _TURNS else 1


def _eight_bit_gray(image: Image.Image) -> Image.Image:
    """A 16-bit grayscale picture at 8 bits, each value scaled (v / 257, rounded)."""
    import numpy as np

    wide = np.asarray(image, dtype=np.uint32)
    return Image.fromarray(((np.minimum(wide, 65535) + 128) // 257).astype(np.uint8), "L")


def _undecodable(exc: Exception, data: bytes) -> str:
    """Why Pillow could not read `data`, as words for the caller: no exception class and no
    Python object in them, but what is known (truncated, a broken header)."""
    if isinstance(exc, UnidentifiedImageError):
        kind = sniffed_mime(data)
        if kind is None:
            return "not an image file"
        return f"a broken {kind.removeprefix('image/').upper()} header"
    reason = _OBJECT_REPR.sub("", str(exc)).strip().rstrip(".")
    if reason.lower() == "truncated file read":
        return "truncated data"
    return reason or "corrupt data"


def _check_pixels(field: str, width: int, height: int, max_pixels: int) -> None:
    if width < 1 or height < 1:
        raise InvalidArgument(f"{field}: {width}x{height} px has no pixels")
    if width * height > max_pixels:
        raise InvalidArgument(
            f"{field}: {width}x{height} px is {width * height} pixels; "
            f"the limit is {max_pixels} pixels (limits.max_input_pixels)"
        )


def _check_bytes(field: str, size: int, width: int, height: int) -> None:
    limit = max_encoded_bytes(width, height)
    if size > limit:
        raise InvalidArgument(
            f"{field}: {size} bytes for a {width}x{height} px image; the limit is {limit} "
            f"bytes at that size ({MAX_BYTES_PER_PIXEL} bytes a pixel, 1 a row and "
            f"{METADATA_ALLOWANCE_BYTES // 2**20} MiB of metadata): drop the padding or "
            "metadata"
        )


def resolve_inputs(
    spec: ModelSpec,
    params: GenerationParams,
    images: dict[str, bytes | None],
    ids: dict[str, str],
    strength: float | None,
    from_uploads: Collection[str] = (),
    *,
    size_set: bool,
) -> GenerationParams:
    """`params` with the request's input images and strength checked and set.

    `images` holds each input's bytes (None: not sent inline) and `ids` its upload id ("":
    none). An input named only by id cannot be looked at here (the gateway's case); the
    scheduler reads the upload's bytes into `images` before it calls this, keeping the id,
    and lists the input in `from_uploads`. Errors name the field the caller set.

    `size_set` says the caller set width or height. Without either, the job's size is the
    input image's (see `_size_from_image`); with them, a model that takes width and height
    resizes its input to them.
    """
    for name in ("image", "mask_image"):
        field = input_field(name, ids.get(name, ""))
        sent = bool(images.get(name)) or bool(ids.get(name))
        if sent and name not in spec.inputs:
            raise InvalidArgument(
                f"{field}: model {spec.name!r} ({spec.pipeline}) takes no {name}; "
                f"leave it unset (its inputs: {', '.join(spec.inputs) or 'none'})"
            )
        if images.get(name) and ids.get(name) and name not in from_uploads:
            raise InvalidArgument(f"{name}: set {name} or {ID_FIELDS[name]}, not both")
        if name in spec.inputs and not sent:
            raise InvalidArgument(
                f"{name}: required by model {spec.name!r} ({spec.pipeline}); {how_to_send(name)}"
            )
    if "image" not in spec.inputs:
        return params
    value = spec.default_strength if strength is None else strength
    if "strength" in spec.accepted_fields:
        check_strength(value, params.steps, spec.pipeline, sent=strength is not None)
    found = {
        name: probe_image(input_field(name, ids.get(name, "")), data, spec.limits.max_input_pixels)
        for name, data in images.items()
        if data and name in spec.inputs
    }
    image, mask = found.get("image"), found.get("mask_image")
    if (
        image is not None
        and mask is not None
        and (mask.width, mask.height)
        != (
            image.width,
            image.height,
        )
    ):
        raise InvalidArgument(
            f"{input_field('mask_image', ids.get('mask_image', ''))}: "
            f"{mask.width}x{mask.height} px; it must be the size of image "
            f"({image.width}x{image.height} px)"
        )
    params = replace(params, image=image, mask_image=mask, strength=value)
    takes_size = "width" in spec.accepted_fields
    if image is not None and spec.modality != "audio" and not (takes_size and size_set):
        field = input_field("image", ids.get("image", ""))
        params = _size_from_image(spec, params, image, field, resizable=takes_size)
    return params


def check_strength(strength: float, steps: int, pipeline: str, *, sent: bool = True) -> None:
    """InvalidArgument unless 0 < strength <= 1 leaves at least one denoising step, counted
    as `pipeline` counts them: Flux-style pipelines (FRACTIONAL_START) run at least one for
    any strength above 0, Stable Diffusion's round steps * strength down.

    A strength the caller did not send (`sent` False: the model's default, which the OpenAI
    edits route does not even take) is not theirs to change, so too few steps for it names
    `steps`, with the fewest that work. Steps below 1 are left to the steps range check."""
    if not 0 < strength <= 1:
        raise InvalidArgument(
            f"strength: {shown(strength)} is out of range; allowed 0 < strength <= 1"
        )
    if steps < 1 or denoising_steps(pipeline, steps, strength) >= 1:
        return
    if sent:
        raise InvalidArgument(
            f"strength: {shown(strength)} with {steps} steps leaves no denoising step; "
            f"{pipeline} needs steps * strength of at least 1"
        )
    # 1 / strength, give or take the float's rounding: one or two counts settle it.
    start = max(steps + 1, math.ceil(1 / strength) - 1)
    fewest = next(n for n in itertools.count(start) if denoising_steps(pipeline, n, strength))
    raise InvalidArgument(
        f"steps: {steps} leaves no denoising step at the model's strength {shown(strength)} "
        f"({pipeline} runs steps * strength of them); use at least {fewest} steps"
    )


def _size_from_image(
    spec: ModelSpec, params: GenerationParams, image: InputImage, field: str, *, resizable: bool
) -> GenerationParams:
    # The job's size is the input's, so the input is held to the output's limits. Either the
    # pipeline makes its output at the input's size (it takes no width or height), or it
    # does take them (`resizable`) and the caller set neither: the entry's default size
    # would then squash an input of any other shape into it.
    lim = spec.limits
    width, height = image.width, image.height
    fits = (
        width <= lim.max_width
        and height <= lim.max_height
        and width % lim.size_multiple == 0
        and height % lim.size_multiple == 0
    )
    if not fits and not resizable:
        raise InvalidArgument(
            f"{field}: {width}x{height} px; {spec.name} makes its result at the input's size, "
            f"which must be a multiple of {lim.size_multiple} px up to "
            f"{lim.max_width}x{lim.max_height} px"
        )
    if not fits:
        raise InvalidArgument(
            f"{field}: {width}x{height} px; without width and height {spec.name} makes its "
            f"result at the input's size, which must be a multiple of {lim.size_multiple} px "
            f"up to {lim.max_width}x{lim.max_height} px; set width and height to have the "
            "input resized"
        )
    return replace(params, width=width, height=height)


def check_input_params(spec: ModelSpec, params: GenerationParams) -> None:
    """InvalidArgument when a resolved job's inputs do not fit its model (a worker checks
    each job it is sent with this, as with `params.check_generation`)."""
    for name in ("image", "mask_image"):
        value: InputImage | None = getattr(params, name)
        if value is not None and name not in spec.inputs:
            raise InvalidArgument(f"{name}: model {spec.name!r} takes no {name}")
        # A worker learns the size only from the header when it reads the input (0 here).
        if value is not None and value.width:
            _check_pixels(name, value.width, value.height, spec.limits.max_input_pixels)
    if params.image is not None and "strength" in spec.accepted_fields:
        check_strength(params.strength, params.steps, spec.pipeline)
