"""One job followed on the terminal, for `mediamesh generate` and `mediamesh watch`: a
progress bar, notices and previews as the events come, then the result written to a file."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from mediamesh.cli.gateway_args import DEFAULT_GATEWAY
from mediamesh.cli.previews import PreviewSaver
from mediamesh.common.output_formats import extension_for
from mediamesh.sdk import Error, Event, Notice, Progress, Queued, Result


class JobOnTerminal:
    """Draws a job's events as they come; `job_id` and `final` hold what was seen so far,
    so an interrupted follow can still name its job."""

    def __init__(self, quiet: bool, steps: int | None, preview_dir: Path | None) -> None:
        # quiet: no progress bar and no notices (dispatched, resumed, ...), only the outcome.
        self._quiet, self._steps = quiet, steps
        # Drawn at the first event: a job that cannot be followed shows no empty bar.
        self._bar: tqdm[Any] | None = None
        self.previews = PreviewSaver(preview_dir)
        self.job_id = ""
        self.final: Result | Error | None = None

    @property
    def bar(self) -> tqdm[Any]:
        """The progress bar, drawn from the first time it is asked for."""
        bar = self._bar
        if bar is None:
            total = self._steps or None
            bar = tqdm(total=total, unit="step", disable=self._quiet, file=sys.stderr)
            self._bar = bar
        return bar

    def follow(self, events: Iterable[Event]) -> None:
        """Draws every event until the Result or Error (which `final` then holds)."""
        for event in events:
            bar = self.bar
            self.job_id = event.job_id
            match event:
                case Queued(position=position):
                    bar.set_description(f"queued #{position}")
                case Progress(step=step, total_steps=total):
                    bar.total = total
                    bar.set_description("denoising")
                    bar.n = step
                    if event.preview:
                        self.previews.take(event)
                        bar.set_postfix_str(f"previews: {self.previews.count}")
                    bar.refresh()
                case Notice(kind=kind, message=message) if not self._quiet:
                    # tqdm writes even with its bar disabled; --quiet promises only the
                    # result's path or the error.
                    bar.write(f"{kind}: {message}")
                case Result() | Error():
                    self.final = event

    def close(self) -> None:
        """Ends the progress bar's line, if one was drawn."""
        if self._bar is not None:
            self._bar.close()

    def report(self, out: Path, previews_asked: bool, gateway: str = DEFAULT_GATEWAY) -> int:
        """Writes the Result to `out` (its extension set to the result's format) and prints
        where; prints the Error. Quiet, the line is only where the result is (its path, or
        its URL), for a script to use as it is. The command's exit code."""
        final = self.final
        if not isinstance(final, Result):
            assert final is not None  # a followed job ends with a Result or an Error
            print(
                f"mediamesh: job {final.job_id} {final.state}: {final.code} {final.message}",
                file=sys.stderr,
            )
            return 1
        if final.url and not final.data:
            size = final.size_bytes
            print(
                final.url
                if self._quiet
                else f"{final.url} ({final.mime_type}, {size} bytes, seed {final.seed})"
            )
            return 0
        path = result_path(out, final.mime_type)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(final.data)
        except OSError as exc:
            # The job ran: say how to fetch its result again rather than lose it.
            print(f"mediamesh: {unwritable(path, exc, final.job_id, gateway)}", file=sys.stderr)
            return 1
        if self._quiet:
            print(path)
            return 0
        print(f"{path} ({final.mime_type}, {len(final.data)} bytes, seed {final.seed})")
        if previews_asked:
            folder = self.previews.folder
            where = f" (in {folder})" if folder and self.previews.count else ""
            print(f"previews: {self.previews.count}{where}")
        return 0


def still_running(job_id: str, out: Path, gateway: str = DEFAULT_GATEWAY) -> str:
    """What to tell a user who interrupted the follow of `job_id`: the job goes on, and the
    commands (ready to paste; the API key stays out of them) that follow or stop it."""
    reach = "" if gateway == DEFAULT_GATEWAY else f" --gateway {shlex.quote(gateway)}"
    return (
        f"interrupted; job {job_id} goes on: `mediamesh watch {job_id}{reach} --out "
        f"{shlex.quote(str(out))}` follows it again, `mediamesh cancel {job_id}{reach}` stops it"
    )


def out_refusal(out: Path) -> str | None:
    """Why `out` can never be written (a folder, or under a file), checked before a job is
    submitted so that none runs for nothing; None when it may be."""
    if out.is_dir():
        return f"--out: {out} is a directory; name a file in it"
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            return f"--out: {out} cannot be written: {parent} is a file, not a directory"
    return None


def unwritable(path: Path, exc: OSError, job_id: str, gateway: str = DEFAULT_GATEWAY) -> str:
    """The one line for a result that could not be written to `path`: the OS error, and the
    command (ready to paste) that fetches the ended job's result again."""
    reach = "" if gateway == DEFAULT_GATEWAY else f" --gateway {shlex.quote(gateway)}"
    why = exc.strerror or str(exc)
    return (
        f"--out: cannot write {path}: {why}; job {job_id} ended, fetch its result with "
        f"`mediamesh watch {job_id}{reach} --out OTHER_FILE`"
    )


def result_path(out: Path, mime_type: str) -> Path:
    """`out` with the extension of the result's format, so a webp is never saved as .png."""
    extension = extension_for(mime_type)
    # jpeg results are named .jpg, but a caller's own .jpeg is just as right.
    same = {extension, "jpeg"} if extension == "jpg" else {extension}
    if out.suffix.lower().lstrip(".") in same:
        return out
    return out.with_name(f"{out.stem if out.suffix else out.name}.{extension}")
