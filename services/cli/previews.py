"""What `mediamesh generate` does with the latent previews of its job: counts them, and
saves them when given a folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mediamesh.common.output_formats import extension_for
from mediamesh.sdk import Progress


@dataclass
class PreviewSaver:
    """Counts the previews received; with `folder`, writes each as step-NNNN.<ext>."""

    folder: Path | None = None
    count: int = 0

    def take(self, event: Progress) -> None:
        """One more preview; a later run of the same step (after a restart) overwrites."""
        self.count += 1
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        extension = extension_for(event.preview_mime_type)
        (self.folder / f"step-{event.step:04d}.{extension}").write_bytes(event.preview)
