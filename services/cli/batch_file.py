"""Reading the prompts file of `mediamesh batch`: one checked request per line, and its key.

Lines are split on "\\n" alone (a "\\r" before it is dropped), not with str.splitlines():
JSON strings may hold U+2028, U+2029 or U+0085 unescaped, and splitlines() cuts through
them. A UTF-8 byte-order mark at the start is skipped. Decoding and JSON errors name the line
and the column.

What refuses the whole file, before anything is sent: a line that is not a JSON object, an
unknown field, a value of the wrong JSON type, no prompt, no model, an unknown priority. Such
a file was not written for this command, and guessing at the rest of it would waste a run.
A value of the right type that no request may carry (steps -3, a seed above the mesh's
maximum, timeout_ms beyond a uint32) fails only its own line: the SDK's option checks run as
the file is read, and the line gets a REJECTED row naming the field and its limit, as the
gateway's own refusals do, while the other lines run.

A line's idempotency key is `batch:<digest>:<line number>`, the digest being the SHA-256 of
the request the line makes: its fields as canonical JSON, with the model (from --model when
it names none) and the priority it takes filled in, and the output folder, so that the same
line run into another folder is another batch's job, not the first one's again. Editing a
line changes its key alone, so only that line runs again; appending runs only the new
lines. The line number keeps two identical lines of one file two jobs; inserting a line
renumbers those after it, and as results are named by line number, those run again too.
"""

from __future__ import annotations

import codecs
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mediamesh.sdk.options import check_option

# What a line may say, and the JSON type each value must have.
LINE_FIELDS: dict[str, tuple[type, ...]] = {
    "prompt": (str,),
    "negative_prompt": (str,),
    "model": (str,),
    "steps": (int,),
    "seed": (int,),
    "width": (int,),
    "height": (int,),
    "num_frames": (int,),
    "duration_s": (int, float),
    "guidance_scale": (int, float),
    "output_format": (str,),
    "output_quality": (int,),
    "fps": (int,),
    "priority": (str,),
    "timeout_ms": (int,),
}
PRIORITIES = ("REALTIME", "STANDARD", "BATCH")


class BatchFileError(ValueError):
    """A prompts file that cannot be run, naming the line at fault."""


@dataclass(frozen=True)
class BatchLine:
    """One request of the file. `problem` is why no request may carry it ("" when none)."""

    number: int
    key: str
    fields: dict[str, Any]
    problem: str = ""


def read_batch(path: Path, default_model: str | None, scope: str = "") -> list[BatchLine]:
    """Every non-blank line of `path` as a request; BatchFileError for a file that cannot run.
    `scope` (the output folder) goes into every key: the same line run into another folder is
    another batch, and gets its own jobs rather than the first folder's."""
    raw = path.read_bytes().removeprefix(codecs.BOM_UTF8)
    lines = []
    for number, chunk in enumerate(raw.split(b"\n"), start=1):
        text = _decoded(number, chunk.removesuffix(b"\r"))
        # JSON's own whitespace only: a line of U+2028 is an error, not a blank line.
        if text.strip(" \t\r"):
            lines.append(_batch_line(number, text, default_model, scope))
    if not lines:
        raise BatchFileError(f"{path}: no prompts (one JSON object per line)")
    return lines


def line_key(number: int, fields: dict[str, Any], scope: str = "") -> str:
    """The idempotency key of line `number` asking for `fields` (model and priority filled in)
    in the batch of `scope`."""
    # ASCII-escaped, so that a lone surrogate ("\ud800" is valid JSON) still encodes.
    canonical = json.dumps(
        {"scope": scope, "fields": fields}, sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )
    return f"batch:{hashlib.sha256(canonical.encode()).hexdigest()[:32]}:{number}"


def _decoded(number: int, chunk: bytes) -> str:
    try:
        return chunk.decode("utf-8")
    except UnicodeDecodeError as exc:
        column = len(chunk[: exc.start].decode("utf-8")) + 1
        raise BatchFileError(
            f"line {number}, column {column}: not valid UTF-8 (byte 0x{chunk[exc.start]:02x})"
        ) from None


def _batch_line(number: int, text: str, default_model: str | None, scope: str) -> BatchLine:
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BatchFileError(
            f"line {number}, column {exc.colno}: not valid JSON ({exc.msg})"
        ) from None
    if not isinstance(fields, dict):
        raise BatchFileError(f"line {number}: expected a JSON object")
    for name, value in fields.items():
        kinds = LINE_FIELDS.get(name)
        if kinds is None:
            raise BatchFileError(
                f"line {number}: unknown field {name!r}; allowed: {', '.join(LINE_FIELDS)}"
            )
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise BatchFileError(f"line {number}: {name} must be {kinds[0].__name__}")
    if not fields.get("prompt"):
        raise BatchFileError(f"line {number}: prompt is required")
    fields.setdefault("model", default_model)
    if not fields["model"]:
        raise BatchFileError(f'line {number}: no model; add "model" or pass --model')
    priority = str(fields.get("priority", "BATCH")).upper()
    if priority not in PRIORITIES:
        raise BatchFileError(f"line {number}: priority must be one of {', '.join(PRIORITIES)}")
    fields["priority"] = priority
    return BatchLine(number, line_key(number, fields, scope), fields, _problem(fields))


def _problem(fields: dict[str, Any]) -> str:
    """The SDK's refusal of the first value no request may carry, naming field and limit."""
    for name, value in fields.items():
        try:
            check_option(name, value)  # prompt and model are no options: nothing to check
        except (TypeError, ValueError) as exc:
            return str(exc)
    return ""
