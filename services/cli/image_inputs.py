"""`mediamesh generate --image in.png [--mask m.png] --strength 0.6`: the input options.

An image up to the inline limit travels inside the request; a larger one is streamed with
the Upload rpc first and named by its input_id, so it is not bound by the message limit.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mediamesh.cli.arg_types import bounded
from mediamesh.common.limits import INPUT_IMAGE

if TYPE_CHECKING:
    from mediamesh.sdk import Client


def add_image_arguments(parser: argparse.ArgumentParser) -> None:
    """The input image options of `generate`."""
    parser.add_argument(
        "--image",
        type=Path,
        help="input image (PNG, JPEG or WebP) for img2img, "
        "inpainting or the first frame of a video",
    )
    parser.add_argument("--mask", type=Path, help="inpainting mask, the size of --image")
    parser.add_argument("--strength", type=float, help="0 < s <= 1: how far to move from --image")
    parser.add_argument(
        "--upload-above",
        type=bounded(int, 0),
        default=INPUT_IMAGE.max_bytes,
        metavar="BYTES",
        help="upload images larger than this first, 0 or more (default: the inline limit, 8 MiB)",
    )


def image_options(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    """The generate options for the input arguments: bytes inline, or an upload's id."""
    options: dict[str, Any] = {"strength": args.strength}
    for field, path in (("image", args.image), ("mask_image", args.mask)):
        if path is None:
            continue
        data = path.read_bytes()
        if len(data) > args.upload_above:
            options[f"{field}_id"] = client.upload(data).input_id
        else:
            options[field] = data
    return options
