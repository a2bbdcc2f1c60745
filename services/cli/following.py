"""One job followed on the terminal, for `mediamesh generate` and `mediamesh watch`: a
progress bar, notices and previews as the events come, then the result written to a file."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from tqdm import tqdm

from mediamesh.cli.previews import PreviewSaver
from mediamesh.common.output_formats import extension_for
from mediamesh.sdk import Error, Event, Notice, Progress, Queued, Result


class JobOnTerminal:
    """Draws a job's events as they come; `job_id` and `final` hold what was seen so far,
    so an interrupted follow can still name its job."""

    def __init__(self, quiet: bool, steps: int | None, preview_dir: Path | None) -> None:
        self.bar = tqdm(total=steps or None, unit="step", disable=quiet, file=sys.stderr)
        self.previews = PreviewSaver(preview_dir)
        self.job_id = ""
        self.final: Result | Error | None = None

    def follow(self, events: Iterable[Event]) -> None:
        """Draws every event until the Result or Error (which `final` then holds)."""
        bar = self.bar
        for event in events:
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
                case Notice(kind=kind, message=message):
                    bar.write(f"{kind}: {message}")
                case Result() | Error():
                    self.final = event

    def close(self) -> None:
        """Ends the progress bar's line."""
        self.bar.close()

    def report(self, out: Path, previews_asked: bool) -> int:
        """Writes the Result to `out` (its extension set to the result's format) and prints
        where; prints the Error. The command's exit code."""
        final = self.final
        if not isinstance(final, Result):
            assert final is not None  # a followed job ends with a Result or an Error
            print(
                f"mediamesh: job {final.job_id} {final.state}: {final.code} {final.message}",
                file=sys.stderr,
            )
            return 1
        if final.url and not final.data:
            print(f"{final.url} ({final.mime_type}, {final.size_bytes} bytes, seed {final.seed})")
            return 0
        path = result_path(out, final.mime_type)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(final.data)
        print(f"{path} ({final.mime_type}, {len(final.data)} bytes, seed {final.seed})")
        if previews_asked:
            folder = self.previews.folder
            where = f" (in {folder})" if folder and self.previews.count else ""
            print(f"previews: {self.previews.count}{where}")
        return 0


def still_running(job_id: str, out: Path) -> str:
    """What to tell a user who interrupted the follow of `job_id`: the job goes on."""
    return (
        f"interrupted; job {job_id} goes on: `mediamesh watch {job_id} --out {out}` follows it "
        f"again, `mediamesh cancel {job_id}` stops it"
    )


def result_path(out: Path, mime_type: str) -> Path:
    """`out` with the extension of the result's format, so a webp is never saved as .png."""
    extension = extension_for(mime_type)
    # jpeg results are named .jpg, but a caller's own .jpeg is just as right.
    same = {extension, "jpeg"} if extension == "jpg" else {extension}
    if out.suffix.lower().lstrip(".") in same:
        return out
    return out.with_name(f"{out.stem if out.suffix else out.name}.{extension}")
