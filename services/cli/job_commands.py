"""Commands about jobs already made: `mediamesh jobs` lists them (a page or all, as a table
or JSON lines), `mediamesh watch` follows one to its result, `mediamesh cancel` stops one,
`mediamesh delete` deletes an ended one with its result.

Each is a read against the tenant's read budget, which a running `mediamesh batch` of the
same tenant may be spending: an over-budget answer (RESOURCE_EXHAUSTED with a retry hint)
is waited out as the gateway asks, up to READ_ATTEMPTS calls and MAX_READ_WAIT_S of waiting
in all, as the batch itself does, before it is reported. The channel's own retries give up
sooner: its retry throttling stops them after a few refusals in a row.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from mediamesh.cli.arg_types import bounded
from mediamesh.cli.gateway_args import add_gateway_arguments, gateway_options
from mediamesh.common.errors import StatusCode
from mediamesh.common.limits import MAX_JOB_PAGE_SIZE

if TYPE_CHECKING:
    # The SDK (and grpc with it) loads only when the command runs.
    from mediamesh.sdk import Client, Event, GatewayError, JobInfo, JobPage, JobState

_T = TypeVar("_T")

# Calls one read makes at most while the gateway answers it is over the read budget, and
# the seconds of waiting (as each answer's hint asks) it spends at most.
READ_ATTEMPTS = 6
MAX_READ_WAIT_S = 30.0
# The flags of `mediamesh jobs` by the ListJobs field a refusal names.
FLAG_OF_FIELD = {
    "after_job_id": "--after",
    "page_size": "--limit",
    "states": "--state",
    "models": "--model",
}


def add_job_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    jobs = sub.add_parser(
        "jobs",
        help="list your jobs (every tenant's with an admin key), newest first",
        description="Jobs are listed from acceptance until the scheduler's result retention "
        "forgets them.",
    )
    add_gateway_arguments(jobs)
    jobs.add_argument(
        "--state",
        action="append",
        type=_job_state,
        default=[],
        help="only jobs in this state, e.g. running or failed (repeatable)",
    )
    jobs.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    jobs.add_argument(
        "--limit",
        type=bounded(int, 0),
        default=20,
        help="jobs to show, 0 for every one (fetched 100 a page)",
    )
    jobs.add_argument("--after", default=None, help="start after this job id")
    jobs.add_argument("--oldest-first", action="store_true")
    jobs.add_argument("--json", action="store_true", help="one JSON object per job")
    jobs.set_defaults(handler=_cmd_jobs)

    watch = sub.add_parser(
        "watch", help="follow a job to its end with a progress bar and write its result"
    )
    add_gateway_arguments(watch)
    watch.add_argument("job_id")
    watch.add_argument(
        "--out",
        type=Path,
        required=True,
        help="file to write the result to; its extension is set to the result's format",
    )
    watch.add_argument(
        "--preview-dir", type=Path, help="save each latent preview here as step-NNNN.<ext>"
    )
    watch.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar and no notices: print only the result's path, or the error",
    )
    watch.set_defaults(handler=_cmd_watch)

    cancel = sub.add_parser("cancel", help="cancel a job (a running one stops at its next step)")
    add_gateway_arguments(cancel)
    cancel.add_argument("job_id")
    cancel.set_defaults(handler=_cmd_cancel)

    delete = sub.add_parser(
        "delete",
        help="delete an ended job: its result and its record",
        description="Deletes an ended job before the scheduler's retention would; the mesh "
        "forgets it from then on. A job that has not ended is refused: cancel it first.",
    )
    add_gateway_arguments(delete)
    delete.add_argument("job_id")
    delete.set_defaults(handler=_cmd_delete)


def _job_state(text: str) -> JobState:
    """--state as a job state in any case; refused here, where argparse names the flag, rather
    than by the SDK once the command runs, whose words name only its own argument."""
    from mediamesh.sdk import JobState

    try:
        state = JobState(text.upper())
    except ValueError:
        state = JobState.UNSPECIFIED
    if state is JobState.UNSPECIFIED:
        choices = ", ".join(s.value for s in JobState if s is not JobState.UNSPECIFIED)
        raise argparse.ArgumentTypeError(f"{text!r} is not a job state; use one of {choices}")
    return state


def over_budget_wait(error: GatewayError, attempt: int, waited_s: float) -> float | None:
    """Seconds to wait before calling again after `error` (the `attempt`th call's, with
    `waited_s` waited so far), or None to report it: only for an over-limit answer with a
    retry hint, and only within READ_ATTEMPTS and MAX_READ_WAIT_S."""
    if error.code != StatusCode.RESOURCE_EXHAUSTED or error.retry_after_s <= 0:
        return None
    if attempt >= READ_ATTEMPTS or waited_s + error.retry_after_s > MAX_READ_WAIT_S:
        return None
    return error.retry_after_s


def read(call: Callable[[], _T]) -> _T:
    """`call()`, called again while the gateway answers it is over the read budget."""
    from mediamesh.sdk import GatewayError

    attempt, waited = 1, 0.0
    while True:
        try:
            return call()
        except GatewayError as exc:
            wait = over_budget_wait(exc, attempt, waited)
            if wait is None:
                raise
        time.sleep(wait)
        attempt, waited = attempt + 1, waited + wait


def _watched(client: Client, job_id: str) -> Iterator[Event]:
    """The job's events; the Watch is opened again while the gateway answers it is over the
    read budget, which it does before the first event, never after."""
    yield from read(lambda: _opened(client.watch(job_id)))


def _opened(events: Iterator[Event]) -> Iterator[Event]:
    """`events` with its first event already read (so that its refusal is raised here)."""
    first = next(events)
    return itertools.chain((first,), events)


def _cmd_watch(args: argparse.Namespace) -> int:
    from mediamesh.cli.following import JobOnTerminal, out_refusal, still_running
    from mediamesh.sdk import Client, GatewayError

    refusal = out_refusal(args.out)
    if refusal is not None:
        print(f"mediamesh: {refusal}", file=sys.stderr)
        return 2
    terminal = JobOnTerminal(args.quiet, None, args.preview_dir)
    try:
        with Client(args.gateway, **gateway_options(args)) as client:
            terminal.follow(_watched(client, args.job_id))
    except (GatewayError, OSError, ValueError) as exc:
        terminal.close()
        print(f"mediamesh: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        terminal.close()
        going_on = still_running(args.job_id, args.out, args.gateway)
        print(f"mediamesh: {going_on}", file=sys.stderr)
        return 130
    terminal.close()
    return terminal.report(args.out, args.preview_dir is not None, gateway=args.gateway)


def _cmd_cancel(args: argparse.Namespace) -> int:
    from mediamesh.sdk import Client, GatewayError, JobState

    try:
        with Client(args.gateway, **gateway_options(args)) as client:
            # Asked first: Cancel answers an ended job's state too, and a job cancelled
            # before would read as cancelled now.
            job = read(lambda: client.get(args.job_id))
            ended_before = job.state.terminal
            if not ended_before:
                job = read(lambda: client.cancel(args.job_id))
    except (GatewayError, OSError, ValueError) as exc:
        print(f"mediamesh: {exc}", file=sys.stderr)
        return 1
    print(f"job {job.job_id} {job.state}")
    if ended_before:
        print(f"mediamesh: job {job.job_id} had already ended; nothing changed", file=sys.stderr)
        return 1
    # It may have ended on its own meanwhile: its state says which happened.
    return 0 if job.state is JobState.CANCELLED else 1


def _cmd_delete(args: argparse.Namespace) -> int:
    from mediamesh.sdk import Client, GatewayError

    try:
        with Client(args.gateway, **gateway_options(args)) as client:
            deleted = read(lambda: client.delete_job(args.job_id))
    except (GatewayError, OSError, ValueError) as exc:
        print(f"mediamesh: {exc}", file=sys.stderr)
        return 1
    print(f"job {deleted.job_id} deleted ({deleted.state}, {deleted.result_bytes} bytes of result)")
    return 0


def _cmd_jobs(args: argparse.Namespace) -> int:
    from mediamesh.sdk import Client, GatewayError

    try:
        with Client(args.gateway, **gateway_options(args)) as client:
            jobs = list(itertools.islice(_matching(client, args), args.limit or None))
    except GatewayError as exc:
        # The flag the refused field came from, before the gateway's words (which name the
        # request's field: `after_job_id: no job ...` for --after).
        flag = FLAG_OF_FIELD.get((exc.field or "").split(".")[0].split("[")[0])
        print(f"mediamesh: {flag + ': ' if flag else ''}{exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"mediamesh: {exc}", file=sys.stderr)
        return 1
    if args.json:
        for job in jobs:
            print(json.dumps(dataclasses.asdict(job), default=str))
    else:
        print(job_table(jobs))
    return 0


def _matching(client: Client, args: argparse.Namespace) -> Iterator[JobInfo]:
    """The jobs the flags ask for after `--after`, fetched a page at a time as read."""
    page_size = min(args.limit or MAX_JOB_PAGE_SIZE, MAX_JOB_PAGE_SIZE)

    def page_after(after: str | None) -> JobPage:
        return client.list_jobs(
            states=args.state,
            models=args.model,
            oldest_first=args.oldest_first,
            after=after,
            page_size=page_size,
        )

    after: str | None = args.after
    while True:
        page = read(functools.partial(page_after, after))
        yield from page.jobs
        if not page.has_more or page.last_id is None:
            return
        after = page.last_id


def job_table(jobs: list[JobInfo]) -> str:
    """Jobs as aligned columns: id, model, state, progress, acceptance time and outcome, and
    the tenant when the list holds several (an admin key's)."""
    if not jobs:
        return "no jobs"
    tenants = len({job.tenant for job in jobs}) > 1
    header = ("JOB", *(("TENANT",) if tenants else ()), "MODEL", "STATE", "STEP")
    rows = [(*header, "CREATED (UTC)", "RESULT / ERROR")]
    for job in jobs:
        created = datetime.datetime.fromtimestamp(job.created_unix_ms / 1000, datetime.UTC)
        if job.error_code:
            outcome = f"{job.error_code}: {job.error_message}"[:80]
        elif job.mime_type:
            outcome = f"{job.mime_type}, {job.size_bytes} bytes"
        else:
            outcome = ""
        rows.append(
            (
                job.job_id,
                *((job.tenant,) if tenants else ()),
                job.model,
                f"{job.state} (paused)" if job.paused else str(job.state),
                f"{job.step}/{job.total_steps}",
                created.strftime("%Y-%m-%d %H:%M:%S"),
                outcome,
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
