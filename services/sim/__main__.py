"""`python -m mediamesh.sim SCENARIO ...`: the `mediamesh simulate` command without the CLI."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from mediamesh.cli.simulate_command import add_simulate_command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mediamesh.sim")
    sub = parser.add_subparsers(dest="command", required=True)
    add_simulate_command(sub)
    args = parser.parse_args(["simulate", *(sys.argv[1:] if argv is None else argv)])
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
