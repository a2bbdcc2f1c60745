"""`mediamesh generate --out` that cannot be written: refused before any job is submitted
when it can be told (a directory, a parent that is a file), else one line after the job
that names --out, the OS error, and how to fetch the result again; never a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mediamesh.cli.following import JobOnTerminal
from mediamesh.cli.main import main
from mediamesh.sdk import Event, JobState, Result


class SucceedingClient:
    submitted = 0

    def __init__(self, target: str, **settings: object) -> None:
        pass

    def __enter__(self) -> SucceedingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def generate(self, model: str, prompt: str, **options: Any) -> Iterator[Event]:
        SucceedingClient.submitted += 1
        yield Result(
            job_id="j-7", state=JobState.SUCCEEDED, data=b"png", mime_type="image/png", seed=1
        )


def _generate(out: Path) -> int:
    argv = ["generate", "--gateway", "127.0.0.1:9", "--model", "flux-tiny", "--prompt", "x"]
    return main([*argv, "--out", str(out), "--quiet"])


@pytest.mark.parametrize("under_a_file", [False, True])
def test_an_out_that_can_never_be_written_is_refused_before_submitting(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    under_a_file: bool,
) -> None:
    monkeypatch.setattr("mediamesh.sdk.Client", SucceedingClient)
    SucceedingClient.submitted = 0
    (tmp_path / "a.jpg").write_bytes(b"")
    out = tmp_path / "a.jpg" / "x.png" if under_a_file else tmp_path
    assert _generate(out) == 2
    assert SucceedingClient.submitted == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("mediamesh: --out: ")


def test_a_write_that_fails_after_the_job_names_out_and_the_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A result of another format lands on a folder of that name, which no check saw coming.
    (tmp_path / "fox.webp").mkdir()
    terminal = JobOnTerminal(True, None, None)
    terminal.follow(
        [Result(job_id="j-7", state=JobState.SUCCEEDED, data=b"w", mime_type="image/webp", seed=1)]
    )
    assert terminal.report(tmp_path / "fox.png", previews_asked=False, gateway="h:1") == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"mediamesh: --out: cannot write {tmp_path / 'fox.webp'}: ")
    assert "`mediamesh watch j-7 --gateway h:1 --out OTHER_FILE`" in lines[0]


def test_watch_refuses_an_out_that_is_a_folder_before_asking_the_gateway(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_client(*args: object, **kwargs: object) -> None:
        raise AssertionError("the gateway was asked")

    monkeypatch.setattr("mediamesh.sdk.Client", no_client)
    assert main(["watch", "j-7", "--gateway", "127.0.0.1:9", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("mediamesh: --out: ")
