"""Hooks a test installs to cause, on a CPU, device conditions it cannot otherwise cause.

A host calls `before_call(model, jobs)` right before each model call and `after_call`
right after it returns. With no hook installed (always, outside tests) they do nothing. A
test installs one per model name to raise an out-of-memory error above some batch size,
or to hold a warm-up call until it has looked at the mesh. Hooks meant for the helper
ranks of a tensor- or context-parallel group are handed to them when the group starts,
so they must pickle (`FailCalls` does). Torch-free: hooks raise what the test makes them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from mediamesh.common.work import JobParams

BeforeCall = Callable[[list[JobParams]], None]
# (model, after): `after` is False for the point before the call, True for after it.
HookKey = tuple[str, bool]

_lock = threading.Lock()
_hooks: dict[HookKey, BeforeCall] = {}
_helper_rank_hooks: dict[HookKey, BeforeCall] = {}


def install(model: str, hook: BeforeCall, *, after: bool = False) -> None:
    """Calls `hook(jobs)` before (or `after`) every call of `model` until `remove(model)`."""
    with _lock:
        _hooks[(model, after)] = hook


def install_on_helper_ranks(model: str, hook: BeforeCall, *, after: bool = False) -> None:
    """Like `install`, but on ranks 1.. of groups started from now on (not in this process)."""
    with _lock:
        _helper_rank_hooks[(model, after)] = hook


def helper_rank_hooks() -> dict[HookKey, BeforeCall]:
    """What a group starting now hands its helper ranks."""
    with _lock:
        return dict(_helper_rank_hooks)


def install_all(hooks: Mapping[HookKey, BeforeCall]) -> None:
    """A helper rank's start: installs what `helper_rank_hooks` gave it."""
    with _lock:
        _hooks.update(hooks)


def remove(model: str) -> None:
    """Uninstalls every hook of `model`, if any."""
    with _lock:
        for registry in (_hooks, _helper_rank_hooks):
            for key in [key for key in registry if key[0] == model]:
                del registry[key]


def before_call(model: str, jobs: list[JobParams]) -> None:
    """Runs the hook installed before calls of `model` (it may block or raise)."""
    _run((model, False), jobs)


def after_call(model: str, jobs: list[JobParams]) -> None:
    """Runs the hook installed after calls of `model` (it may block or raise)."""
    _run((model, True), jobs)


def _run(key: HookKey, jobs: list[JobParams]) -> None:
    with _lock:
        hook = _hooks.get(key)
    if hook is not None:
        hook(jobs)


@dataclass
class FailCalls:
    """A hook that pickles: fails a call whose first job id starts with one of `rules`'
    prefixes when it has more jobs than that rule's `(largest, out_of_memory)` allows,
    with the CPU allocator's out-of-memory message or, if not `out_of_memory`, another
    error. `sizes` records the size of every call a rule matched, in this process."""

    rules: dict[str, tuple[int, bool]]
    sizes: list[int] = field(default_factory=list)

    def __call__(self, jobs: list[JobParams]) -> None:
        """Records the call's size if a rule matches, and fails it if the rule says so."""
        rule = next(
            (r for p, r in self.rules.items() if jobs and jobs[0].job_id.startswith(p)), None
        )
        if rule is None:
            return
        self.sizes.append(len(jobs))
        largest, out_of_memory = rule
        if len(jobs) > largest:
            if out_of_memory:
                raise RuntimeError("DefaultCPUAllocator: not enough memory (call_hooks.FailCalls)")
            raise RuntimeError("a call failed on purpose (call_hooks.FailCalls)")
