"""Hooks a test installs to cause, on a CPU, device conditions it cannot otherwise cause.

A host calls `before_call(model, jobs)` right before each model call. With no hook
installed (always, outside tests) it does nothing. A test installs one per model name to
raise an out-of-memory error above some batch size, or to hold a warm-up call until it
has looked at the mesh. Torch-free: hooks raise whatever the test makes them raise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from mediamesh.common.work import JobParams

BeforeCall = Callable[[list[JobParams]], None]

_lock = threading.Lock()
_hooks: dict[str, BeforeCall] = {}


def install(model: str, hook: BeforeCall) -> None:
    """Calls `hook(jobs)` before every call of `model` until `remove(model)`."""
    with _lock:
        _hooks[model] = hook


def remove(model: str) -> None:
    """Uninstalls the hook of `model`, if any."""
    with _lock:
        _hooks.pop(model, None)


def before_call(model: str, jobs: list[JobParams]) -> None:
    """Runs the hook installed for `model` (it may block or raise)."""
    with _lock:
        hook = _hooks.get(model)
    if hook is not None:
        hook(jobs)
