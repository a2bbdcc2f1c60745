"""`mediamesh simulate` refuses a flag that does not apply to the mode chosen (exit 2, naming
the flag) rather than running without it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from mediamesh.cli.simulate_command import add_simulate_command


def _handled(argv: list[str], tmp_path: Path) -> int:
    parser = argparse.ArgumentParser(prog="mediamesh")
    add_simulate_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["simulate", "small", "--no-plot", "--out", str(tmp_path), *argv])
    code: int = args.handler(args)
    return code


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--right-size", "--jobs", "10"], "--jobs does not apply with --right-size"),
        (["--right-size", "--devices", "4"], "--devices does not apply with --right-size"),
        (["--sla-target", "0.9"], "--sla-target applies only with --right-size"),
        (["--window-s", "30"], "--window-s applies only with --right-size"),
    ],
)
def test_a_flag_of_the_other_mode_is_refused_naming_it(
    argv: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _handled(argv, tmp_path) == 2
    assert f"mediamesh simulate: {line}" in capsys.readouterr().err
    assert not list(tmp_path.iterdir()), "nothing runs, nothing is written"
