"""A batch taken out of the device's line while its thread waits gives up the wait.

A worker stopping cancels each batch's task; a task cancelled while it awaited its batch's
thread withdrew the batch from the gate, and a thread still waiting in line then waited for
ever, and so did the device pool's shutdown (a test run once hung there at its teardown).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import load_registry
from mediamesh.common.work import JobParams
from mediamesh.worker.core.batch import BatchCancelled, BatchControl, Emit
from mediamesh.worker.core.gate import DeviceGate, Rank
from mediamesh.worker.runtime import WorkerRuntime


def _waiting(target, *args: str) -> tuple[threading.Thread, list[bool]]:
    """`target(*args)` on a thread of its own; its answer lands in the list."""
    answer: list[bool] = []
    thread = threading.Thread(target=lambda: answer.append(target(*args)), daemon=True)
    thread.start()
    return thread, answer


def test_a_batch_withdrawn_while_it_waits_in_line_stops_waiting_without_the_device() -> None:
    gate = DeviceGate()
    gate.enqueue("a", Rank.NORMAL)
    assert gate.acquire("a")
    gate.enqueue("b", Rank.NORMAL)
    thread, answer = _waiting(gate.acquire, "b")
    thread.join(0.2)
    assert thread.is_alive(), "b waits while a holds the device"
    gate.withdraw("b")
    thread.join(5)
    assert answer == [False] and gate.holder == "a"
    # The line goes on as before.
    gate.enqueue("c", Rank.NORMAL)
    gate.release("a")
    assert gate.acquire("c") and gate.holder == "c"


def test_a_batch_withdrawn_before_its_thread_started_never_takes_the_device() -> None:
    gate = DeviceGate()
    gate.enqueue("b", Rank.NORMAL)
    gate.withdraw("b")
    assert gate.acquire("b") is False
    assert gate.holder is None
    # Withdrawing a batch that is not in line leaves nothing behind for a later one.
    gate.withdraw("z")
    gate.enqueue("z", Rank.NORMAL)
    assert gate.acquire("z")


def test_a_paused_batch_withdrawn_while_it_stands_aside_stops() -> None:
    gate = DeviceGate()
    gate.enqueue("a", Rank.NORMAL)
    assert gate.acquire("a")
    gate.enqueue("urgent", Rank.URGENT)
    control = BatchControl(["job-a"])
    control.attach_gate(gate, "a")
    control.request_pause()
    paused = threading.Event()
    outcome: list[BaseException | bool] = []

    def at_step_boundary() -> None:
        try:
            outcome.append(control.pause_here(paused.set, lambda: None))
        except BatchCancelled as exc:
            outcome.append(exc)

    thread = threading.Thread(target=at_step_boundary, daemon=True)
    thread.start()
    assert paused.wait(5)
    assert gate.acquire("urgent")
    gate.withdraw("a")
    thread.join(5)
    assert len(outcome) == 1 and isinstance(outcome[0], BatchCancelled)
    assert gate.holder == "urgent", "the urgent batch keeps the device"


class _HeldHost:
    """Each batch computes until the test lets it finish."""

    def __init__(self) -> None:
        spec = load_registry().get("echo")
        assert spec is not None
        self.spec = spec
        self.device_ids = ["withdraw-test-device"]
        self.started = {"a": threading.Event(), "b": threading.Event()}
        self.finish = threading.Event()

    def run_batch(self, jobs: list[JobParams], control: BatchControl, emit: Emit) -> None:
        self.started[jobs[0].job_id].set()
        assert self.finish.wait(10)

    def close(self) -> None:
        return None


async def test_a_worker_closes_with_a_batch_whose_cancelled_task_left_it_waiting_in_line():
    host = _HeldHost()
    runtime = WorkerRuntime("w", "on-demand", {"echo": host})  # type: ignore[dict-item]

    async def run(job_id: str) -> None:
        jobs = [JobParams(job_id, GenerationParams(prompt="x", steps=2, width=16, height=16))]
        async for _ in runtime.run_batch(f"batch-{job_id}", "echo", jobs):
            pass

    first = asyncio.create_task(run("a"))
    while not host.started["a"].is_set():
        await asyncio.sleep(0.01)
    second = asyncio.create_task(run("b"))  # given ahead: its thread waits at the gate
    await asyncio.sleep(0.1)
    # Cancelled twice, as a stopping loop may: the second lands while the task awaits its
    # batch's thread, and the batch leaves the line with that thread still waiting in it.
    for _ in range(2):
        second.cancel()
        await asyncio.sleep(0.05)
    with contextlib.suppress(asyncio.CancelledError):
        await second
    host.finish.set()
    await first
    await asyncio.wait_for(asyncio.to_thread(runtime.close), 10)
    assert not host.started["b"].is_set(), "the withdrawn batch never ran"
