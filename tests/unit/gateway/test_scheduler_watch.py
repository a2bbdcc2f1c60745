"""When a gateway calls itself unfit to serve: only after losing its scheduler for a while."""

from __future__ import annotations

from mediamesh.gateway.scheduler_watch import SchedulerWatch


class Script:
    """Probe answers and a clock the test moves by hand; records each health change."""

    def __init__(self) -> None:
        self.now = 100.0
        self.answers: list[bool] = []
        self.changes: list[bool] = []

    async def probe(self, timeout: float) -> bool:
        assert timeout > 0
        return self.answers.pop(0)

    async def set_serving(self, serving: bool) -> None:
        self.changes.append(serving)

    def clock(self) -> float:
        return self.now


async def check_at(watch: SchedulerWatch, script: Script, now: float, answer: bool) -> None:
    script.now = now
    script.answers.append(answer)
    await watch.check()


async def test_not_serving_only_after_the_allowance_and_serving_at_the_first_answer() -> None:
    script = Script()
    watch = SchedulerWatch(script.probe, script.set_serving, 5.0, clock=script.clock)
    assert watch.interval_s <= 5.0 / 3

    await check_at(watch, script, 101.0, True)
    await check_at(watch, script, 102.0, False)
    await check_at(watch, script, 105.9, False)  # 4.9 s without an answer: still serving
    assert script.changes == [] and watch.serving

    await check_at(watch, script, 106.0, False)
    await check_at(watch, script, 107.0, False)  # reported once, not at every probe
    assert script.changes == [False] and not watch.serving

    await check_at(watch, script, 108.0, True)
    assert script.changes == [False, True] and watch.serving
    # The allowance counts from the last answer again.
    await check_at(watch, script, 112.0, False)
    assert script.changes == [False, True]


async def test_a_scheduler_never_seen_counts_from_the_start() -> None:
    script = Script()
    watch = SchedulerWatch(script.probe, script.set_serving, 2.0, clock=script.clock)
    await check_at(watch, script, 101.0, False)
    assert script.changes == []
    await check_at(watch, script, 102.5, False)
    assert script.changes == [False]
