"""`mediamesh batch prompts.jsonl --out DIR`: thousands of jobs, resumable at any point.

Each non-blank line is a JSON object with at least `prompt` (batch_file reads and checks
them). Each line is sent with an idempotency key made from its own content and number, so a
re-run submits nothing twice: the gateway answers a repeated Submit with the job it already
has, and the batch re-attaches to it. Results are written as they finish, as
DIR/<line>.<ext>, each followed by a row in DIR/manifest.jsonl (batch_manifest says what the
rows mean: which lines are done, which key retries a failed one, whose folder it is).

A line the mesh refuses or whose job ends without a result is recorded as such and the run
goes on; a re-run retries it under a new key. A refusal that sending the line again cannot
change is recorded at once: a permanent code, or DEADLINE_EXCEEDED naming the line's own
`timeout_ms` (admission found it shorter than the job itself; GatewayError.field tells that
refusal from a deadline of the call, which, like an unavailable gateway, is retried). A line
edited since its result was written supersedes that file whatever its new outcome: another
format's file replaces it, and no result at all removes it.

What no line could get past stops the run with exit 2 and records nothing for the lines
waiting on their job, so a re-run resumes them: a refused API key, a tenant at its result
quota, or a gateway that answers nothing for UNREACHABLE_AFTER_S (every call UNAVAILABLE over
that window, whichever line made it) - without that, each line would spend its retries on its
own, some 38 s each, hours for a large file. Lines whose job has ended are still recorded and
deleted before it exits. With --delete-results the quota's refusal only stops the run once
none of its own lines is under way: until then their deletions free it (batch_quota). A
re-run with --delete-results first deletes the jobs of earlier rows never deleted
(DIR/deleted.txt lists those that were). Ctrl-C stops it at once (exit 130, saying so).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mediamesh.cli.batch_file import BatchFileError, BatchLine, read_batch, with_scope
from mediamesh.cli.batch_manifest import (
    DELETED,
    MANIFEST,
    FolderBusyError,
    History,
    RunFileError,
    folder_lock,
)
from mediamesh.cli.batch_quota import ResultQuotaWaits
from mediamesh.cli.gateway_args import add_gateway_arguments, gateway_options
from mediamesh.common.errors import StatusCode
from mediamesh.common.output_formats import EXTENSIONS
from mediamesh.sdk import AsyncClient, Error, GatewayError, JobState, Result

__all__ = ["MANIFEST", "BatchFileError", "BatchLine", "BatchRun", "read_batch"]

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
# The field a DEADLINE_EXCEEDED refusal of admission names when the line's own timeout_ms
# is shorter than its job needs: no retry with that timeout can succeed. "timeout" is what a
# scheduler before mediamesh named it. A deadline of the call itself names no field.
OWN_TIMEOUT_FIELDS = frozenset({"timeout_ms", "timeout"})
# Answers that no line of this batch could get past.
FATAL_CODES = frozenset({StatusCode.UNAUTHENTICATED})
# The states of a job that ran and ended; a line refused before it made a job has none.
ENDED_STATES = frozenset(state.value for state in JobState if state.terminal)
# The tenant holds its quota of stored results until it deletes some or their retention ends
# (a day by default). Waiting 0.2 s at a time, as for back-pressure, the run went on asking
# for ever: it stops, and a re-run resumes; with --delete-results only once none of its own
# lines is under way, whose deletions would free the quota (see batch_quota).
QUOTA_FIELDS = frozenset({"result_quota_bytes"})
TRANSIENT_ATTEMPTS = 8
# Lines in flight at once: --concurrency must be within these. Each holds a job's stream
# open; more than this only queues at the gateway's limits.
MIN_CONCURRENCY, MAX_CONCURRENCY = 1, 1024
# Failed lines listed after a run (in line order); the manifest has every one.
FAILURES_SHOWN = 10
# Long enough to ride out a gateway restart; shorter than one line's TRANSIENT_ATTEMPTS
# (35 s of backoff), so an unreachable gateway stops the run before it fails any line.
UNREACHABLE_AFTER_S = 30.0


class FatalBatchError(RuntimeError):
    """The gateway refused the whole batch (e.g. a bad API key)."""


class GatewayUnreachableError(FatalBatchError):
    """No call reached the gateway for UNREACHABLE_AFTER_S."""


@dataclass
class Outcome:
    """How one line ended, as its manifest row records it."""

    job_id: str
    state: str
    data: bytes = b""
    mime_type: str = ""
    error_code: str = ""
    error_message: str = ""

    @classmethod
    def rejected(cls, job_id: str, code: str, message: str) -> Outcome:
        """A line the mesh (or the checks before sending) refused."""
        return cls(job_id, "REJECTED", error_code=code, error_message=message)


def is_permanent(exc: GatewayError) -> bool:
    """Whether sending the same line again would get the same answer."""
    if exc.code == StatusCode.DEADLINE_EXCEEDED:
        return exc.field in OWN_TIMEOUT_FIELDS
    return exc.code in PERMANENT_CODES


@dataclass
class Counts:
    """What a run did, for its summary."""

    succeeded: int = 0
    failed: int = 0
    skipped: int = 0
    # With --delete-results: jobs deleted from the mesh, and those it could not delete.
    deleted: int = 0
    kept: int = 0
    kept_because: str = ""  # why the last of those was not
    # (line number, what happened), as lines end; `failure_lines` gives them in line order.
    failures: list[tuple[int, str]] = field(default_factory=list)

    def failure_lines(self, shown: int) -> list[str]:
        """The first `shown` failures in line order, and how many more there are."""
        ordered = [text for _, text in sorted(self.failures)]
        more = len(ordered) - shown
        return ordered[:shown] + ([f"and {more} more failed lines"] if more > 0 else [])


class BatchRun:
    """Runs lines (each with the key to send it with) and records each as it ends."""

    def __init__(
        self,
        client: AsyncClient,
        out: Path,
        manifest: IO[str],
        bar: Any,
        source: str,
        history: History | None = None,
        run_id: str = "",
        delete_results: bool = False,
    ) -> None:
        self.client, self.out, self.manifest, self.bar = client, out, manifest, bar
        # Delete each ended job from the mesh once its outcome is in the folder and the
        # manifest, so that a long run stays within the tenant's result quota.
        self.delete_results = delete_results
        self.source = source  # the prompts file, as the rows' `input`
        self.run_id = run_id  # the scope of the rows' keys (see batch_manifest)
        # What the folder held before: a new result may supersede a file of another name.
        self.history = history
        self.counts = Counts()
        # When the calls began to find the gateway UNAVAILABLE, all of them since; None
        # while anything gets an answer.
        self.unreachable_since: float | None = None
        # What stopped the run (see `run`); the lines waiting for their job, for it to cancel.
        self.fatal: FatalBatchError | None = None
        self.awaiting_outcome: set[asyncio.Task[Outcome]] = set()
        self.quota = ResultQuotaWaits()

    async def run(self, todo: list[BatchLine], concurrency: int) -> Counts:
        """Run `todo`, `concurrency` lines at a time. A FatalBatchError (raised in an
        ExceptionGroup once the lines under way are settled) stops them: no further line is
        sent, those waiting for their job are dropped unrecorded (a re-run re-attaches), and
        those whose job ended are recorded and, with delete_results, deleted."""
        if self.delete_results and self.history is not None:
            # Jobs recorded by an earlier run but never deleted (it was stopped between a row
            # and its deletion): first, since they may be what holds the quota.
            leftovers = self.history.undeleted_jobs(ENDED_STATES)
            await self._in_parallel(leftovers, self._delete, concurrency)
        if self.fatal is None:
            await self._in_parallel(todo, self._line, concurrency)
        if self.fatal is not None:
            raise ExceptionGroup("the batch stopped", [self.fatal])
        return self.counts

    async def _in_parallel(
        self, items: list[Any], each: Callable[[Any], Awaitable[None]], concurrency: int
    ) -> None:
        pending: Iterator[Any] = iter(items)

        async def drain() -> None:
            for item in pending:  # shared: each item goes to exactly one of the loops
                if self.fatal is not None:
                    return
                await each(item)

        async with asyncio.TaskGroup() as group:
            for _ in range(max(1, min(concurrency, len(items)))):
                group.create_task(drain())

    def _stop(self, fatal: FatalBatchError) -> None:
        """Stop the run: no more lines, and none waits on for its job; what is being
        recorded or deleted goes on."""
        if self.fatal is None:
            self.fatal = fatal
        for waiting in list(self.awaiting_outcome):
            waiting.cancel()

    async def _line(self, line: BatchLine) -> None:
        started = time.monotonic()
        if line.problem:
            # Checked as the file was read: sending it would only be refused.
            self._record(line, Outcome.rejected("", StatusCode.INVALID_ARGUMENT, line.problem), 0.0)
            return
        self.quota.started()
        try:
            # A task of its own, so that a stop cancels this wait and not the recording and
            # deleting after it.
            awaiting = asyncio.create_task(self._outcome(line))
            self.awaiting_outcome.add(awaiting)
            try:
                outcome = await awaiting
            except FatalBatchError as exc:
                self._stop(exc)
                return
            except asyncio.CancelledError:
                this = asyncio.current_task()
                if awaiting.cancelled() and this is not None and not this.cancelling():
                    return  # another line stopped the run
                raise
            finally:
                self.awaiting_outcome.discard(awaiting)
            self._record(line, outcome, time.monotonic() - started)
            if self.delete_results and outcome.state in ENDED_STATES:
                # After the row: deleted first, a run killed in between would submit the line
                # again under its key, now free, and make it twice.
                await self._delete(outcome.job_id)
        finally:
            self.quota.ended()

    async def _outcome(self, line: BatchLine) -> Outcome:
        job_id = ""
        try:
            job_id = await self._retrying(self._submit, line)
            outcome: Outcome = await self._retrying(self._follow, job_id)
        except GatewayError as exc:
            outcome = Outcome.rejected(job_id, exc.code, exc.message)
        return outcome

    async def _delete(self, job_id: str) -> None:
        try:
            await self._retrying(self.client.delete_job, job_id)
        except FatalBatchError as exc:
            self._stop(exc)  # the job stays, its row has no deletion: a re-run deletes it
            return
        except GatewayError as exc:
            if exc.code != StatusCode.NOT_FOUND:  # gone already: its retention, or a re-run
                self.counts.kept += 1
                self.counts.kept_because = f"{exc.code}: {exc.message}"
                return
        self.counts.deleted += 1
        with (self.out / DELETED).open("a", encoding="utf-8") as deleted:
            deleted.write(job_id + "\n")  # so that no re-run asks to delete it again

    async def _submit(self, line: BatchLine) -> str:
        """The job id; the same key from the same tenant returns the same job."""
        fields = dict(line.fields)
        model, prompt = fields.pop("model"), fields.pop("prompt")
        try:
            handle = await self.client.submit(model, prompt, idempotency_key=line.key, **fields)
        except (TypeError, ValueError) as exc:
            # The SDK's checks before sending, should one catch what reading the file let
            # through: the line's refusal, like the gateway's, not the whole run's end.
            raise GatewayError(StatusCode.INVALID_ARGUMENT, str(exc)) from None
        return handle.job_id

    async def _follow(self, job_id: str) -> Outcome:
        """Watch a job to its end (replayed at once if it already ended)."""
        async for event in self.client.watch(job_id):
            self.unreachable_since = None  # a long job's events are answers too
            if isinstance(event, Result):
                data = event.data
                if not data and event.url:
                    # A store that signs URLs (S3) sends one for a result above the inline
                    # limit instead of its bytes; the folder needs the bytes themselves.
                    data = (await self.client.download(job_id)).data
                return Outcome(job_id, "SUCCEEDED", data, event.mime_type)
            if isinstance(event, Error):
                return Outcome(
                    job_id, str(event.state), error_code=event.code, error_message=event.message
                )
        # watch ends with a Result or an Error, or raises GatewayError (retried by the caller).
        raise AssertionError(f"the events of job {job_id} ended without an outcome")

    async def _retrying(self, call: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        failures = 0
        waited_for_quota = False
        while True:
            try:
                answer = await call(*args)
            except GatewayError as exc:
                self._note_reachability(exc)
                if exc.field in QUOTA_FIELDS and self.delete_results:
                    # This run's own jobs may hold the quota, and it deletes each as it ends.
                    waited_for_quota = await self.quota.wait_for_room()
                    if waited_for_quota:
                        continue
                if exc.code in FATAL_CODES or exc.field in QUOTA_FIELDS:
                    raise FatalBatchError(f"{exc.code}: {exc.message}") from None
                if is_permanent(exc):
                    raise
                if exc.code == StatusCode.RESOURCE_EXHAUSTED:
                    # Back-pressure (rate or queue limit), not a failure: wait as told.
                    await asyncio.sleep(max(exc.retry_after_s, 0.2))
                    continue
                failures += 1
                if failures >= TRANSIENT_ATTEMPTS:
                    raise
                await asyncio.sleep(min(0.25 * 2**failures, 10))
            else:
                self.unreachable_since = None
                if waited_for_quota:
                    self.quota.let_in()
                return answer

    def _note_reachability(self, exc: GatewayError) -> None:
        """GatewayUnreachableError once every call for UNREACHABLE_AFTER_S was UNAVAILABLE."""
        now = time.monotonic()
        if exc.code == StatusCode.DEADLINE_EXCEEDED:
            return  # no answer in time: from a slow gateway, or from none (a dropped route)
        if exc.code != StatusCode.UNAVAILABLE:
            self.unreachable_since = None
        elif self.unreachable_since is None:
            self.unreachable_since = now
        elif now - self.unreachable_since >= UNREACHABLE_AFTER_S:
            raise GatewayUnreachableError(
                f"gateway unreachable at {self.client.settings.target}: {exc.message} "
                f"(no answer for {UNREACHABLE_AFTER_S:g} s; stopped, re-run to resume)"
            ) from None

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
                (
                    line.number,
                    f"line {line.number}: {outcome.state} {outcome.error_code} "
                    f"{outcome.error_message}",
                )
            )
        row = {
            "line": line.number,
            "job_id": outcome.job_id,
            "state": outcome.state,
            "file": file_name,
            "seconds": round(seconds, 3),
            "key": line.key,
            "input": self.source,
            "run_id": self.run_id,
        }
        if outcome.state != "SUCCEEDED":
            row["error"] = f"{outcome.error_code}: {outcome.error_message}"
        earlier = self.history.superseded_file(line, file_name) if self.history else None
        if earlier is not None:
            # The line was edited: a result of its old content is no longer its, whether the
            # new one made a file of another name or none at all.
            (self.out / earlier).unlink(missing_ok=True)
        self.manifest.write(json.dumps(row) + "\n")
        self.manifest.flush()
        self.bar.update(1)
        self.bar.set_postfix(ok=self.counts.succeeded, failed=self.counts.failed, refresh=False)


def add_batch_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `batch` subcommand."""
    batch = sub.add_parser(
        "batch", help="run a JSONL file of prompts as jobs (resumable), results into a folder"
    )
    batch.add_argument("file", type=Path, help="one JSON object per line, each with a prompt")
    batch.add_argument("--out", type=Path, required=True, help="folder for results + manifest")
    batch.add_argument("--model", help="model for lines that name none")
    add_gateway_arguments(batch)
    batch.add_argument(
        "--concurrency",
        type=_concurrency,
        default=16,
        help=f"jobs in flight at once, {MIN_CONCURRENCY} to {MAX_CONCURRENCY}",
    )
    batch.add_argument("--quiet", action="store_true", help="no progress bar")
    batch.add_argument(
        "--delete-results",
        action="store_true",
        help="delete each job from the mesh once its result is in --out (frees the tenant's "
        "result quota)",
    )
    batch.set_defaults(handler=_cmd_batch)


def _concurrency(text: str) -> int:
    """--concurrency as a number in range; argparse names the flag when this refuses it."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not MIN_CONCURRENCY <= value <= MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from {MIN_CONCURRENCY} to {MAX_CONCURRENCY}, got {text!r}"
        )
    return value


def _cmd_batch(args: argparse.Namespace) -> int:
    try:
        # Checked before the folder is touched; the keys are made once its run id is known.
        lines = read_batch(args.file, args.model)
    except (OSError, BatchFileError) as exc:
        for text in str(exc).splitlines():  # every line at fault, each on its own
            print(f"mediamesh batch: {text}", file=sys.stderr)
        return 2
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"mediamesh batch: --out {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        with folder_lock(args.out):
            return _run_into_folder(args, lines)
    except FolderBusyError as exc:
        print(f"mediamesh batch: {exc}", file=sys.stderr)
        return 2


def _run_into_folder(args: argparse.Namespace, lines: list[BatchLine]) -> int:
    """The run, with the output folder to itself (see `folder_lock`)."""
    from tqdm import tqdm

    source = str(args.file.resolve())
    try:
        history = History.read(args.out)
        run_id = history.scope()
    except (RunFileError, OSError) as exc:
        print(f"mediamesh batch: {exc}", file=sys.stderr)
        return 2
    lines = with_scope(lines, run_id)
    other = history.other_input(source, lines)
    if other is not None:
        print(
            f"mediamesh batch: {args.out} holds the results of another input, {other}; "
            "use another --out (or remove that folder to start over)",
            file=sys.stderr,
        )
        return 2
    replaced = history.replaced(lines)
    if replaced:
        shown = ", ".join(map(str, replaced[:10])) + (", ..." if len(replaced) > 10 else "")
        print(
            f"mediamesh batch: {len(replaced)} line(s) changed since their results were "
            f"written (line {shown}): running them again; each one's earlier result is "
            "replaced, or removed if it now gets none",
            file=sys.stderr,
        )
    done = [line for line in lines if history.is_done(line)]
    todo = [
        dataclasses.replace(line, key=history.attempt_key(line))
        for line in lines
        if not history.is_done(line)
    ]
    bar = tqdm(
        total=len(lines), initial=len(done), unit="job", desc="batch",
        disable=args.quiet, file=sys.stderr,
    )  # fmt: skip

    async def main() -> Counts:
        # Ctrl-C through the loop's own handler: it wakes the loop through its wakeup fd.
        # asyncio.run's handler only cancels once the loop next runs Python, and with every
        # line waiting on a quiet stream nothing woke it, so the run sat out the streams
        # (seen once in a CI run: 30 s and no exit).
        this = asyncio.current_task()
        if this is not None and threading.current_thread() is threading.main_thread():
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, this.cancel)
        options = gateway_options(args)
        async with AsyncClient(args.gateway, **options) as client:
            with (args.out / MANIFEST).open("a", encoding="utf-8") as manifest:
                run = BatchRun(
                    client, args.out, manifest, bar, source, history, run_id, args.delete_results
                )
                return await run.run(todo, args.concurrency)

    try:
        # Nothing to run may still leave an earlier run's jobs to delete.
        leftovers = (
            args.delete_results and history is not None and history.undeleted_jobs(ENDED_STATES)
        )
        counts = asyncio.run(main()) if todo or leftovers else Counts()
    except BaseExceptionGroup as group:
        fatal = group.subgroup(FatalBatchError)
        if fatal is None:
            raise
        bar.close()
        print(f"mediamesh batch: {_first(fatal)}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, asyncio.CancelledError):
        # Lines that ended are recorded, those in flight are not: a re-run picks them up.
        bar.close()
        print("mediamesh batch: interrupted; re-run the same command to resume", file=sys.stderr)
        return 130
    bar.close()
    counts.skipped = len(done)
    for failure in counts.failure_lines(FAILURES_SHOWN):
        print(failure, file=sys.stderr)
    deleted = ""
    if args.delete_results:
        deleted = f"{counts.deleted} deleted from the mesh"
        if counts.kept:
            deleted += (
                f", {counts.kept} not, to go at its retention (the last: {counts.kept_because})"
            )
        deleted += "; "
    print(
        f"{counts.succeeded} succeeded, {counts.failed} failed, {counts.skipped} already done; "
        f"{deleted}manifest {args.out / MANIFEST}"
    )
    return 0 if counts.failed == 0 else 1


def _first(group: BaseExceptionGroup[FatalBatchError]) -> BaseException:
    """The first error of a group that may nest groups (a TaskGroup inside a TaskGroup)."""
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first
