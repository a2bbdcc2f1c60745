"""Ctrl-C during `mediamesh generate` leaves the job running and says how to reach it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mediamesh.cli.main import main
from mediamesh.sdk import Event, JobState, Queued


class InterruptedClient:
    """A Client whose generate yields `events`, then is interrupted as by Ctrl-C."""

    events: list[Event] = []
    options: dict[str, Any] = {}

    def __init__(self, target: str, **settings: object) -> None:
        pass

    def __enter__(self) -> InterruptedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def generate(self, model: str, prompt: str, **options: Any) -> Iterator[Event]:
        InterruptedClient.options = options
        yield from self.events
        raise KeyboardInterrupt


def run(tmp_path: Path, *flags: str) -> int:
    argv = ["generate", "--gateway", "127.0.0.1:9", "--model", "flux-tiny", "--prompt", "x"]
    return main([*argv, *flags, "--out", str(tmp_path / "o.png"), "--quiet"])


def test_interrupted_after_acceptance_names_the_job_and_how_to_cancel_or_follow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mediamesh.sdk.Client", InterruptedClient)
    InterruptedClient.events = [
        Queued(job_id="j-42", state=JobState.QUEUED, position=0, eta_s=1.0, queue="q")
    ]
    assert run(tmp_path) == 130
    assert InterruptedClient.options["idempotency_key"].startswith("cli-")
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    line = lines[0]
    out = tmp_path / "o.png"
    assert line == (
        "mediamesh: interrupted; job j-42 goes on: `mediamesh watch j-42 --gateway 127.0.0.1:9 "
        f"--out {out}` follows it again, `mediamesh cancel j-42 --gateway 127.0.0.1:9` stops it"
    )


def test_interrupted_before_acceptance_names_the_key_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mediamesh.sdk.Client", InterruptedClient)
    InterruptedClient.events = []
    assert run(tmp_path, "--idempotency-key", "mine-1") == 130
    assert InterruptedClient.options["idempotency_key"] == "mine-1"
    line = capsys.readouterr().err.strip()
    assert line.startswith("mediamesh: interrupted before the job was accepted")
    assert "--idempotency-key mine-1" in line and "\n" not in line
