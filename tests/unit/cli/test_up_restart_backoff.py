"""`mediamesh up` restarts a child that exits at once, waits longer before each further
restart of a child crashing in a loop, and not for a child that crashes after running a
while (a streak, not a lifetime count)."""

from __future__ import annotations

from mediamesh.cli.up import (
    RESTART_BACKOFF_MAX_S,
    RESTART_BACKOFF_STEP_S,
    RESTART_STREAK_RESET_S,
    Child,
)


def test_the_back_off_grows_over_exits_in_a_row_up_to_its_most() -> None:
    child = Child("scheduler", ["true"], "127.0.0.1:1")
    delays = []
    now = 100.0
    for _ in range(12):
        child.started_at = now
        now += 1.0  # exits a second after each start
        delays.append(child.restart_delay(now))
    assert delays[:3] == [n * RESTART_BACKOFF_STEP_S for n in (0, 1, 2)]
    assert max(delays) == RESTART_BACKOFF_MAX_S == delays[-1]
    assert child.restarts == 12


def test_a_child_that_ran_a_while_restarts_at_once_again() -> None:
    child = Child("scheduler", ["true"], "127.0.0.1:1")
    for start in (0.0, 1.0, 2.0, 3.0):
        child.started_at = start
        child.restart_delay(start + 0.5)
    assert child.exit_streak == 4
    child.started_at = 10.0
    assert child.restart_delay(10.0 + RESTART_STREAK_RESET_S) == 0.0
    assert (child.exit_streak, child.restarts) == (1, 5)
