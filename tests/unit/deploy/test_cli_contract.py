"""The deploy files only run `mediamesh` subcommands and flags the CLI really has.

Fails until services/cli/main.py provides `build_parser()`; that is expected.
"""

from __future__ import annotations

import argparse
import re

import pytest
from deploy_support import DEPLOY, mediamesh_commands

# Every `mediamesh` subcommand the deploy files run or tell operators to run.
DEPLOY_SUBCOMMANDS = {
    ("scheduler",),
    ("gateway",),
    ("worker",),
    ("models", "build"),
    ("healthcheck",),
    ("drain",),
    ("status",),
    ("jobs",),
    ("batch",),
    ("up",),
}
# Values that stand for what a shell or Docker fills in at run time.
PLACEHOLDERS = {"$HEALTHCHECK_ADDRESS": "127.0.0.1:50051"}
# `mediamesh X` or `mediamesh X Y` written in backticks in comments and docs.
MENTION = re.compile(r"`mediamesh ([a-z][\w-]*)(?: ([a-z][\w-]*))?")


def _subcommand(argv: tuple[str, ...]) -> tuple[str, ...]:
    first = argv[1]
    if first == "models":
        return (first, argv[2])
    return (first,)


def _mentions() -> set[tuple[str, ...]]:
    found = set()
    for path in DEPLOY.rglob("*"):
        if not path.is_file() or path.suffix == ".json":
            continue
        for match in MENTION.finditer(path.read_text(errors="replace")):
            first, second = match.groups()
            found.add((first, second) if first == "models" and second else (first,))
    return found


def test_deploy_files_use_only_listed_subcommands():
    run = {_subcommand(c.argv) for c in mediamesh_commands()}
    assert {("scheduler",), ("gateway",), ("worker",), ("healthcheck",), ("drain",)} <= run
    unlisted = (run | _mentions()) - DEPLOY_SUBCOMMANDS
    assert not unlisted, f"add these to DEPLOY_SUBCOMMANDS (and to the CLI): {sorted(unlisted)}"


def _parser() -> argparse.ArgumentParser:
    from mediamesh.cli.main import build_parser

    parser = build_parser()
    assert isinstance(parser, argparse.ArgumentParser)
    return parser


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


@pytest.mark.parametrize("subcommand", sorted(DEPLOY_SUBCOMMANDS), ids=" ".join)
def test_cli_has_subcommand(subcommand):
    parser = _parser()
    for word in subcommand:
        choices = _choices(parser)
        assert word in choices, f"`mediamesh {' '.join(subcommand)}`: no subcommand {word!r}"
        parser = choices[word]


def test_cli_accepts_every_deploy_command_line():
    parser = _parser()
    for command in mediamesh_commands():
        argv = [PLACEHOLDERS.get(arg, arg) for arg in command.argv[1:]]
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            pytest.fail(
                f"{command.where}: `mediamesh {' '.join(argv)}` is rejected (exit {exc.code})"
            )
