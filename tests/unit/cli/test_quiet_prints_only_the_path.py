"""`mediamesh generate --quiet` and `watch --quiet` print only where the result is: its
path (or its URL), nothing else on stdout, so that a script can use the line as it is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mediamesh.cli.main import main
from mediamesh.sdk import Event, JobState, Notice, Result
from tests.unit.cli.fake_client import ClientStandIn

FINAL: list[Result] = []


def _events() -> list[Event]:
    notice = Notice(
        job_id="j1",
        state=JobState.DISPATCHED,
        kind="dispatched",
        message="dispatched to w (attempt 1)",
        worker_id="w",
        attempt=1,
    )
    return [notice, *FINAL]


class FinishingClient(ClientStandIn):
    def generate(self, model: str, prompt: str, **options: Any) -> Iterator[Event]:
        yield from _events()

    def watch(self, job_id: str) -> Iterator[Event]:
        yield from _events()


@pytest.fixture(autouse=True)
def finishing_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mediamesh.sdk.Client", FinishingClient)
    png = Result(job_id="j1", state=JobState.SUCCEEDED, data=b"png", mime_type="image/png", seed=3)
    FINAL[:] = [png]


def _run(command: str, out: Path, *flags: str) -> int:
    generate = ["generate", "--model", "flux-tiny", "--prompt", "x"]
    target = generate if command == "generate" else ["watch", "j1"]
    return main([*target, "--gateway", "127.0.0.1:9", "--out", str(out), *flags])


@pytest.mark.parametrize("command", ["generate", "watch"])
def test_quiet_prints_only_the_path(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "lora.webp"
    assert _run(command, out, "--quiet") == 0
    written = tmp_path / "lora.png"
    assert capsys.readouterr() == (f"{written}\n", "")
    assert written.read_bytes() == b"png"


def test_quiet_prints_only_the_url_of_a_result_left_in_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "https://bucket.example/j1.png?sig=1"
    FINAL[:] = [
        Result(
            job_id="j1", state=JobState.SUCCEEDED, data=b"", mime_type="image/png", seed=3, url=url
        )
    ]
    assert _run("generate", tmp_path / "o.png", "--quiet") == 0
    assert capsys.readouterr().out == f"{url}\n"


def test_without_quiet_the_line_says_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run("generate", tmp_path / "o.png") == 0
    notice, result = capsys.readouterr().out.splitlines()
    assert notice == "dispatched: dispatched to w (attempt 1)"
    assert result == f"{tmp_path / 'o.png'} (image/png, 3 bytes, seed 3)"
