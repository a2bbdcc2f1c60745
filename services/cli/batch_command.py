"""`mediamesh batch prompts.jsonl --out DIR`: thousands of jobs, resumable at any point.

Each non-blank line is a JSON object with at least `prompt`. Its idempotency key is the file's
SHA-256 and the line number (and the --model it takes, if it names none), so a re-run submits
nothing twice: the gateway answers a repeated
Submit with the job it already has, and the batch re-attaches to it. Results are written as
they finish, as DIR/<line>.<ext>, each followed by a row in DIR/manifest.jsonl; lines whose
row says SUCCEEDED (for this very file) are skipped on a re-run.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mediamesh.cli.gateway_args import add_gateway_arguments, gateway_options
from mediamesh.common.errors import StatusCode
from mediamesh.common.output_formats import EXTENSIONS
from mediamesh.sdk import AsyncClient, Error, GatewayError, Result

MANIFEST = "manifest.jsonl"
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
# Answers that a retry of the same line cannot change.
PERMANENT_CODES = frozenset(
    {
        StatusCode.INVALID_ARGUMENT,
        StatusCode.NOT_FOUND,
        StatusCode.PERMISSION_DENIED,
        StatusCode.FAILED_PRECONDITION,
        StatusCode.OUT_OF_RANGE,
    }
)
# Answers that no line of this batch could get past.
FATAL_CODES = frozenset({StatusCode.UNAUTHENTICATED})
TRANSIENT_ATTEMPTS = 8


class BatchFileError(ValueError):
    """A prompts file that cannot be run, naming the line at fault."""


class FatalBatchError(RuntimeError):
    """The gateway refused the whole batch (e.g. a bad API key)."""


@dataclass
class Outcome:
    """How one line ended, as its manifest row records it."""

    job_id: str
    state: str
    data: bytes = b""
    mime_type: str = ""
    error_code: str = ""
    error_message: str = ""


@dataclass(frozen=True)
class BatchLine:
    number: int
    key: str
    fields: dict[str, Any]


@dataclass
class Counts:
    succeeded: int = 0
    failed: int = 0
    skipped: int = 0
    failures: list[str] = field(default_factory=list)


def read_batch(path: Path, default_model: str | None) -> list[BatchLine]:
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()[:32]
    lines = []
    for number, text in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if text.strip():
            fields, model_from_flag = _line_fields(number, text, default_model)
            key = f"batch:{digest}:{number}"
            if model_from_flag:
                # --model is part of such a line's request: another --model is another job.
                key += f":{fields['model']}"
            lines.append(BatchLine(number, key, fields))
    if not lines:
        raise BatchFileError(f"{path}: no prompts (one JSON object per line)")
    return lines


def _line_fields(number: int, text: str, default_model: str | None) -> tuple[dict[str, Any], bool]:
    """The line's fields, and whether its model came from --model."""
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BatchFileError(f"line {number}: not valid JSON ({exc.msg})") from None
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
    model_from_flag = "model" not in fields
    fields.setdefault("model", default_model)
    if not fields["model"]:
        raise BatchFileError(f'line {number}: no model; add "model" or pass --model')
    priority = str(fields.get("priority", "BATCH")).upper()
    if priority not in PRIORITIES:
        raise BatchFileError(f"line {number}: priority must be one of {', '.join(PRIORITIES)}")
    fields["priority"] = priority
    return fields, model_from_flag


def succeeded_lines(out: Path, lines: list[BatchLine]) -> set[int]:
    """Lines of this file the manifest records as SUCCEEDED, with their result still there."""
    keys = {line.key: line.number for line in lines}
    done: set[int] = set()
    manifest = out / MANIFEST
    if not manifest.exists():
        return done
    for text in manifest.read_text().splitlines():
        try:
            row = json.loads(text)
        except json.JSONDecodeError:
            continue  # a row cut short when the last run was killed
        number = keys.get(row.get("key"))
        if number is not None and row.get("state") == "SUCCEEDED" and (out / row["file"]).exists():
            done.add(number)
    return done


class BatchRun:
    def __init__(self, client: AsyncClient, out: Path, manifest: IO[str], bar: Any) -> None:
        self.client, self.out, self.manifest, self.bar = client, out, manifest, bar
        self.counts = Counts()

    async def run(self, todo: list[BatchLine], concurrency: int) -> Counts:
        pending: Iterator[BatchLine] = iter(todo)

        async def drain() -> None:
            for line in pending:  # shared: each line goes to exactly one of the loops
                await self._line(line)

        async with asyncio.TaskGroup() as group:
            for _ in range(max(1, min(concurrency, len(todo)))):
                group.create_task(drain())
        return self.counts

    async def _line(self, line: BatchLine) -> None:
        started = time.monotonic()
        job_id = ""
        try:
            job_id = await self._retrying(self._submit, line)
            outcome = await self._retrying(self._follow, job_id)
        except GatewayError as exc:
            outcome = Outcome(job_id, "REJECTED", error_code=exc.code, error_message=exc.message)
        self._record(line, outcome, time.monotonic() - started)

    async def _submit(self, line: BatchLine) -> str:
        """The job id; the same key from the same tenant returns the same job."""
        fields = dict(line.fields)
        handle = await self.client.submit(
            fields.pop("model"), fields.pop("prompt"), idempotency_key=line.key, **fields
        )
        return handle.job_id

    async def _follow(self, job_id: str) -> Outcome:
        """Watch a job to its end (replayed at once if it already ended)."""
        async for event in self.client.watch(job_id):
            if isinstance(event, Result):
                return Outcome(job_id, "SUCCEEDED", event.data, event.mime_type)
            if isinstance(event, Error):
                return Outcome(
                    job_id, str(event.state), error_code=event.code, error_message=event.message
                )
        # watch ends with a Result or an Error, or raises GatewayError (retried by the caller).
        raise AssertionError(f"the events of job {job_id} ended without an outcome")

    async def _retrying(self, call: Any, *args: Any) -> Any:
        failures = 0
        while True:
            try:
                return await call(*args)
            except GatewayError as exc:
                if exc.code in FATAL_CODES:
                    raise FatalBatchError(f"{exc.code}: {exc.message}") from None
                if exc.code in PERMANENT_CODES:
                    raise
                if exc.code == StatusCode.RESOURCE_EXHAUSTED:
                    # Back-pressure (rate or queue limit), not a failure: wait as told.
                    await asyncio.sleep(max(exc.retry_after_s, 0.2))
                    continue
                failures += 1
                if failures >= TRANSIENT_ATTEMPTS:
                    raise
                await asyncio.sleep(min(0.25 * 2**failures, 10))

    def _record(self, line: BatchLine, outcome: Outcome, seconds: float) -> None:
        file_name = None
        if outcome.state == "SUCCEEDED":
            file_name = f"{line.number}.{EXTENSIONS.get(outcome.mime_type, 'bin')}"
            target = self.out / file_name
            partial = target.with_name(target.name + ".part")
            partial.write_bytes(outcome.data)
            os.replace(partial, target)  # a killed run never leaves a half-written result
            self.counts.succeeded += 1
        else:
            self.counts.failed += 1
            self.counts.failures.append(
                f"line {line.number}: {outcome.state} {outcome.error_code} {outcome.error_message}"
            )
        row = {
            "line": line.number,
            "job_id": outcome.job_id,
            "state": outcome.state,
            "file": file_name,
            "seconds": round(seconds, 3),
            "key": line.key,
        }
        if outcome.state != "SUCCEEDED":
            row["error"] = f"{outcome.error_code}: {outcome.error_message}"
        self.manifest.write(json.dumps(row) + "\n")
        self.manifest.flush()
        self.bar.update(1)
        self.bar.set_postfix(ok=self.counts.succeeded, failed=self.counts.failed, refresh=False)


def add_batch_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    batch = sub.add_parser(
        "batch", help="run a JSONL file of prompts as jobs (resumable), results into a folder"
    )
    batch.add_argument("file", type=Path, help="one JSON object per line, each with a prompt")
    batch.add_argument("--out", type=Path, required=True, help="folder for results + manifest")
    batch.add_argument("--model", help="model for lines that name none")
    add_gateway_arguments(batch)
    batch.add_argument("--concurrency", type=int, default=16, help="jobs in flight at once")
    batch.add_argument("--quiet", action="store_true", help="no progress bar")
    batch.set_defaults(handler=_cmd_batch)


def _cmd_batch(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    try:
        lines = read_batch(args.file, args.model)
    except (OSError, UnicodeDecodeError, BatchFileError) as exc:
        print(f"mediamesh batch: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    done = succeeded_lines(args.out, lines)
    todo = [line for line in lines if line.number not in done]
    bar = tqdm(
        total=len(lines), initial=len(done), unit="job", desc="batch",
        disable=args.quiet, file=sys.stderr,
    )  # fmt: skip

    async def main() -> Counts:
        options = gateway_options(args)
        async with AsyncClient(args.gateway, **options) as client:
            with (args.out / MANIFEST).open("a") as manifest:
                return await BatchRun(client, args.out, manifest, bar).run(todo, args.concurrency)

    try:
        counts = asyncio.run(main()) if todo else Counts()
    except BaseExceptionGroup as group:
        fatal = group.subgroup(FatalBatchError)
        if fatal is None:
            raise
        bar.close()
        print(f"mediamesh batch: {fatal.exceptions[0]}", file=sys.stderr)
        return 2
    bar.close()
    counts.skipped = len(done)
    for failure in counts.failures[:10]:
        print(failure, file=sys.stderr)
    print(
        f"{counts.succeeded} succeeded, {counts.failed} failed, {counts.skipped} already done; "
        f"manifest {args.out / MANIFEST}"
    )
    return 0 if counts.failed == 0 else 1
