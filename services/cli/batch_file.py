"""Reading the prompts file of `mediamesh batch`: one checked request per line, and its key.

Lines are split on "\\n" alone (a "\\r" before it is dropped), not with str.splitlines():
JSON strings may hold U+2028, U+2029 or U+0085 unescaped, and splitlines() cuts through
them. A UTF-8 byte-order mark at the start is skipped. Decoding and JSON errors name the line
and the column.

What refuses the whole file, before anything is sent: a line that is not a JSON object, an
unknown field, a value of the wrong JSON type, no prompt, no model, an unknown priority. Such
a file was not written for this command, and guessing at the rest of it would waste a run.
Every such line is reported at once (up to MAX_REPORTED, then how many more), each with its
number and its fields at fault, so that one edit fixes the file. A whole-number field takes
a JSON number with a zero fraction (`4.0`, as some tools write every number) as that whole
number; any other fraction is refused.
A value of the right type that no request may carry (steps -3, a seed above the mesh's
maximum, timeout_ms beyond a uint32) fails only its own line: the SDK's option checks run as
the file is read, and the line gets a REJECTED row naming the field and its limit, as the
gateway's own refusals do, while the other lines run.

A line's idempotency key is `batch:<digest>:<line number>`, the digest being the SHA-256 of
the request the line makes: its fields as canonical JSON, with the model (from --model when
it names none) and the priority it takes filled in, and the batch's scope: the run id that
the output folder's manifest records (batch_manifest), so that the same line run into
another folder is another batch's job, not the first one's again, while the folder itself
may be moved or copied and still resume. Editing a line changes its key alone, so only that
line runs again; appending runs only the new lines. The line number keeps two identical
lines of one file two jobs; inserting a line renumbers those after it, and as results are
named by line number, those run again too.
"""

from __future__ import annotations

import codecs
import dataclasses
import hashlib
import json
from collections.abc import Iterable
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
# Lines at fault shown in one refusal of a file; the rest are counted.
MAX_REPORTED = 20
# The largest whole number a JSON number with a fraction part (a float) holds exactly.
_EXACT_FLOAT_INTS = 2**53


class BatchFileError(ValueError):
    """A prompts file that cannot be run, naming the line at fault."""


@dataclass(frozen=True)
class BatchLine:
    """One request of the file. `problem` is why no request may carry it ("" when none)."""

    number: int
    key: str
    fields: dict[str, Any]
    problem: str = ""


class _LineError(ValueError):
    """What is wrong with one line: each problem names the line and the field."""


def read_batch(path: Path, default_model: str | None, scope: str = "") -> list[BatchLine]:
    """Every non-blank line of `path` as a request; BatchFileError for a file that cannot run,
    naming every line at fault. `scope` (the batch's run id, see `with_scope`) goes into
    every key: the same line run into another batch gets its own jobs."""
    raw = path.read_bytes().removeprefix(codecs.BOM_UTF8)
    lines, faults = [], []
    for number, chunk in enumerate(raw.split(b"\n"), start=1):
        try:
            text = _decoded(number, chunk.removesuffix(b"\r"))
            # JSON's own whitespace only: a line of U+2028 is an error, not a blank line.
            if text.strip(" \t\r"):
                lines.append(_batch_line(number, text, default_model, scope))
        except _LineError as exc:
            faults.append(str(exc))
    if faults:
        shown = faults[:MAX_REPORTED]
        if len(faults) > MAX_REPORTED:
            shown.append(f"and {len(faults) - MAX_REPORTED} more lines at fault")
        raise BatchFileError("\n".join(shown))
    if not lines:
        raise BatchFileError(f"{path}: no prompts (one JSON object per line)")
    return lines


def with_scope(lines: Iterable[BatchLine], scope: str) -> list[BatchLine]:
    """`lines` with keys for the batch of `scope`: the run id its output folder records."""
    return [
        dataclasses.replace(line, key=line_key(line.number, line.fields, scope)) for line in lines
    ]


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
        raise _LineError(
            f"line {number}, column {column}: not valid UTF-8 (byte 0x{chunk[exc.start]:02x})"
        ) from None


def _batch_line(number: int, text: str, default_model: str | None, scope: str) -> BatchLine:
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _LineError(f"line {number}, column {exc.colno}: not valid JSON ({exc.msg})") from None
    if not isinstance(fields, dict):
        raise _LineError(f"line {number}: expected a JSON object")
    problems, mistyped = [], set()
    for name, value in fields.items():
        kinds = LINE_FIELDS.get(name)
        if kinds is None:
            problems.append(f"unknown field {name!r}; allowed: {', '.join(LINE_FIELDS)}")
            continue
        try:
            fields[name] = _typed(name, value, kinds)
        except ValueError as exc:
            problems.append(str(exc))
            mistyped.add(name)
    if not fields.get("prompt") and "prompt" not in mistyped:
        problems.append("prompt is required")
    fields.setdefault("model", default_model)
    if not fields["model"]:
        problems.append('no model; add "model" or pass --model')
    priority = str(fields.get("priority", "BATCH")).upper()
    if priority not in PRIORITIES and "priority" not in mistyped:
        problems.append(f"priority must be one of {', '.join(PRIORITIES)}")
    if problems:
        raise _LineError(f"line {number}: " + "; ".join(problems))
    fields["priority"] = priority
    return BatchLine(number, line_key(number, fields, scope), fields, _problem(fields))


def _typed(name: str, value: Any, kinds: tuple[type, ...]) -> Any:
    """`value` as field `name` takes it; ValueError naming the field, what it takes and what
    it got, when it is of another JSON type."""
    whole_only = kinds == (int,)
    # 4.0 is the whole number 4 (some tools write every number so), where a float holds it
    # exactly: beyond 2**53 the number read may not be the one written.
    if whole_only and isinstance(value, float) and value.is_integer():
        if abs(value) <= _EXACT_FLOAT_INTS:
            return int(value)
        raise ValueError(
            f"{name} must be int, a whole number: {value!r} is too large to be read exactly "
            "with a fraction or an exponent; write its digits alone"
        )
    if not isinstance(value, bool) and isinstance(value, kinds):
        return value
    # "int" stays for whole-number fields: the word the message always used.
    wanted = "int, a whole number" if whole_only else "a number" if float in kinds else "a string"
    raise ValueError(f"{name} must be {wanted}, not {_json_kind(value)}")


def _json_kind(value: Any) -> str:
    """What a JSON value is, for a message."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, str):
        return f"the string {json.dumps(value)}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return repr(value)


def _problem(fields: dict[str, Any]) -> str:
    """The SDK's refusal of the first value no request may carry, naming field and limit."""
    for name, value in fields.items():
        try:
            check_option(name, value)  # prompt and model are no options: nothing to check
        except (TypeError, ValueError) as exc:
            return str(exc)
    return ""
