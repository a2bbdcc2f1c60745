"""A flag out of its range is refused before the command starts anything: exit 2 and one line
naming the flag and its limit, never a traceback or a command that runs and then fails."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

from mediamesh.cli.arg_types import bounded, port
from mediamesh.cli.main import build_parser, main
from mediamesh.sdk import JobPage, JobState
from tests.unit.cli.fake_client import ClientStandIn

GATEWAY = ["--gateway", "127.0.0.1:9"]
GENERATE = ["generate", *GATEWAY, "--model", "flux-tiny", "--prompt", "x", "--quiet"]


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The error line argparse prints for `argv`, which it must refuse with exit 2."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["top", "--interval", "-1"], "argument --interval: must be at least 0.1, not -1"),
        (["top", "--interval", "0"], "argument --interval: must be at least 0.1, not 0"),
        (["top", "--iterations", "-1"], "argument --iterations: must be at least 0, not -1"),
        (
            ["up", "--ready-timeout", "-3"],
            "argument --ready-timeout: must be greater than 0, not -3",
        ),
        (["up", "--ready-timeout", "0"], "argument --ready-timeout: must be greater than 0, not 0"),
        (["drain", "--grace-s", "-5"], "argument --grace-s: must be at least 0, not -5"),
        # gRPC dials a port past 65535 modulo 65536: 99999 reached 34463.
        (
            ["drain", "--address", "127.0.0.1:99999"],
            "argument --address: '127.0.0.1:99999' names port 99999; a port is 1 to 65535",
        ),
        (
            ["status", "--scheduler", "127.0.0.1:70000"],
            "argument --scheduler: '127.0.0.1:70000' names port 70000; a port is 1 to 65535",
        ),
        (
            ["healthcheck", "--address", "127.0.0.1:0"],
            "argument --address: '127.0.0.1:0' names port 0; a port is 1 to 65535",
        ),
        (["healthcheck", "--timeout", "-1"], "argument --timeout: must be greater than 0, not -1"),
        (["healthcheck", "--timeout", "0"], "argument --timeout: must be greater than 0, not 0"),
        (
            ["healthcheck", "--timeout", "nan"],
            "argument --timeout: a finite number is needed, not nan",
        ),
        (["top", "--interval", "inf"], "argument --interval: a finite number is needed, not inf"),
        (
            [*GENERATE, "--out", "o.png", "--upload-above", "-1"],
            "argument --upload-above: must be at least 0, not -1",
        ),
        (["jobs", "--limit", "-1"], "argument --limit: must be at least 0, not -1"),
        (["jobs", "--limit", "two"], "argument --limit: a whole number is needed, not 'two'"),
        (["worker", "--port", "-1"], "argument --port: must be from 0 to 65535, not -1"),
        (
            ["worker", "--metrics-port", "65536"],
            "argument --metrics-port: must be from 0 to 65535, not 65536",
        ),
    ],
)
def test_a_number_out_of_range_is_refused_naming_flag_and_limit(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert refusal(argv, capsys).endswith(f"error: {line}")


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["top", "--interval", "0.1"], "interval", 0.1),
        (["top", "--iterations", "0"], "iterations", 0),
        (["top"], "iterations", 0),
        (["drain", "--grace-s", "0"], "grace_s", 0.0),
        (["healthcheck", "--timeout", "0.5"], "timeout", 0.5),
        (["up", "--ready-timeout", "1"], "ready_timeout", 1.0),
        ([*GENERATE, "--out", "o.png", "--upload-above", "0"], "upload_above", 0),
        (["jobs", "--limit", "0"], "limit", 0),
        (["worker", "--port", "0"], "port", 0),
        (["worker", "--port", "65535"], "port", 65535),
    ],
)
def test_the_limits_themselves_are_taken(argv: list[str], field: str, value: object) -> None:
    assert getattr(build_parser().parse_args(argv), field) == value


def test_the_types_return_the_kind_asked_for() -> None:
    assert type(bounded(int, 0)("3")) is int
    assert type(bounded(float, 0)("3")) is float
    assert port("50060") == 50060


class ListingClient(ClientStandIn):
    """Records the states `mediamesh jobs` asks the SDK for."""

    states: list[object] = []

    def list_jobs(self, **query: object) -> JobPage:
        ListingClient.states = list(query["states"])  # type: ignore[call-overload]
        return JobPage(jobs=[], has_more=False)


def test_an_unknown_job_state_is_refused_naming_the_flag(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mediamesh.sdk.Client", ListingClient)
    ListingClient.states = ["never asked"]
    line = refusal(["jobs", *GATEWAY, "--state", "BOGUS"], capsys)
    assert line == (
        "mediamesh jobs: error: argument --state: 'BOGUS' is not a job state; use one of "
        "QUEUED, DISPATCHED, RUNNING, SUCCEEDED, FAILED, CANCELLED, EXPIRED"
    )
    assert ListingClient.states == ["never asked"]
    # The protobuf's unset value is no state a job is ever in.
    assert "argument --state: 'JOB_STATE_UNSPECIFIED'" in refusal(
        ["jobs", "--state", "JOB_STATE_UNSPECIFIED"], capsys
    )


def test_a_job_state_in_any_case_reaches_the_listing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mediamesh.sdk.Client", ListingClient)
    assert main(["jobs", *GATEWAY, "--state", "running", "--state", "Failed"]) == 0
    assert ListingClient.states == [JobState.RUNNING, JobState.FAILED]
    assert capsys.readouterr().out == "no jobs\n"


class UnusedClient:
    def __init__(self, *_args: object, **_options: object) -> None:
        raise AssertionError("nothing may be sent for a refused command")


@pytest.mark.parametrize("every", [[], ["--preview-every-steps", "0"]])
def test_a_preview_folder_without_previews_asked_for_is_refused(
    every: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("mediamesh.sdk.Client", UnusedClient)
    argv = [*GENERATE, "--out", str(tmp_path / "o.png"), "--preview-dir", str(tmp_path / "p")]
    assert main([*argv, *every]) == 2
    assert capsys.readouterr().err == (
        "mediamesh: --preview-dir: needs --preview-every-steps N (1 or more)\n"
    )
    assert not (tmp_path / "p").exists()


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, list[str] | None]]:
    """The model builder as a stand-in (the real one loads torch): records each build."""
    calls: list[tuple[Path, list[str] | None]] = []

    def build_models(out: Path, names: list[str] | None = None, force: bool = False) -> list[Path]:
        calls.append((out, names))
        out.mkdir(parents=True, exist_ok=True)
        return [out / name for name in names or ["flux-tiny"]]

    fake = ModuleType("mediamesh.worker.models.build")
    fake.BUILDERS = {"flux-tiny": object, "wan-tiny": object}  # type: ignore[attr-defined]
    fake.BUILTIN = {"echo"}  # type: ignore[attr-defined]
    fake.build_models = build_models  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mediamesh.worker.models.build", fake)
    return calls


def test_models_build_refuses_an_unknown_name_naming_only(
    builds: list[tuple[Path, list[str] | None]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["models", "build", "--out", str(tmp_path), "--only", "echo,nope"]) == 2
    assert capsys.readouterr().err == (
        "mediamesh: --only: no builder for nope; known: flux-tiny, wan-tiny\n"
    )
    assert builds == []


@pytest.mark.parametrize("below", ["", "sub/models"])
def test_models_build_refuses_an_out_that_is_a_file(
    below: str,
    builds: list[tuple[Path, list[str] | None]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    file = tmp_path / "models"
    file.write_text("not a folder")
    out = file / below if below else file
    assert main(["models", "build", "--out", str(out)]) == 2
    above = f" (above {out})" if below else ""
    assert capsys.readouterr().err == f"mediamesh: --out: {file}{above} is a file, not a folder\n"
    assert builds == []


def test_models_build_builds_into_a_new_folder(
    builds: list[tuple[Path, list[str] | None]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "a" / "b"
    assert main(["models", "build", "--out", str(out), "--only", "wan-tiny"]) == 0
    assert builds == [(out, ["wan-tiny"])]
    assert capsys.readouterr().out == f"{out / 'wan-tiny'}\n"


def test_models_build_reports_a_folder_it_cannot_write_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(out: Path, names: list[str] | None = None, force: bool = False) -> list[Path]:
        raise PermissionError(13, "Permission denied", str(out / "flux-tiny"))

    fake = ModuleType("mediamesh.worker.models.build")
    fake.BUILDERS = {"flux-tiny": object}  # type: ignore[attr-defined]
    fake.BUILTIN = set()  # type: ignore[attr-defined]
    fake.build_models = refused  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mediamesh.worker.models.build", fake)
    assert main(["models", "build", "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        f"mediamesh: --out: cannot write the models to {tmp_path}: [Errno 13] Permission "
        f"denied: '{tmp_path / 'flux-tiny'}'\n"
    )
