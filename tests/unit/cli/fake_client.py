"""The part every stand-in for the SDK's blocking Client shares: built with any arguments,
and a context manager, as the commands use it."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class ClientStandIn:
    def __init__(self, *_args: object, **_options: object) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None
