"""The device-busy gauge and counter follow the device gate, not the batch threads.

With dispatch-ahead the next batch's thread starts, and used to set the gauge to 1, while it
waits at the gate; the previous batch then ended and set it to 0, so a saturated worker read
idle for most of its samples.
"""

from __future__ import annotations

import asyncio
import threading
import time

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import load_registry
from mediamesh.common.work import JobParams
from mediamesh.worker import metrics
from mediamesh.worker.core.batch import BatchControl, Emit
from mediamesh.worker.core.gate import DeviceGate, Rank
from mediamesh.worker.runtime import WorkerRuntime

DEVICE = "busy-test-device"


def busy(device: str = DEVICE) -> float | None:
    return REGISTRY.get_sample_value("mediamesh_worker_device_busy_ratio", {"device": device})


def busy_seconds(device: str = DEVICE) -> float:
    value = REGISTRY.get_sample_value(
        "mediamesh_worker_device_busy_seconds_total", {"device": device}
    )
    assert value is not None
    return value


class HeldHost:
    """Each batch computes until the test lets it finish."""

    def __init__(self) -> None:
        spec = load_registry().get("echo")
        assert spec is not None
        self.spec = spec
        self.device_ids = [DEVICE]
        self.started: dict[str, threading.Event] = {}
        self.finish: dict[str, threading.Event] = {}

    def expect(self, job_id: str) -> None:
        self.started[job_id] = threading.Event()
        self.finish[job_id] = threading.Event()

    def run_batch(self, jobs: list[JobParams], control: BatchControl, emit: Emit) -> None:
        job_id = jobs[0].job_id
        self.started[job_id].set()
        assert self.finish[job_id].wait(10)

    def close(self) -> None:
        return None


def job(job_id: str) -> JobParams:
    return JobParams(job_id, GenerationParams(prompt="x", steps=2, width=16, height=16))


async def until(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_busy_while_the_next_batch_given_ahead_computes() -> None:
    host = HeldHost()
    runtime = WorkerRuntime("w", "on-demand", {"echo": host})

    async def run(batch_id: str, job_id: str) -> None:
        async for _ in runtime.run_batch(batch_id, "echo", [job(job_id)]):
            pass

    try:
        assert busy() == 0
        before = busy_seconds()
        host.expect("a")
        host.expect("b")
        t0 = time.monotonic()
        first = asyncio.create_task(run("batch-a", "a"))
        await until(host.started["a"].is_set)
        assert busy() == 1
        # Given ahead: its thread starts and waits at the gate while the first computes.
        second = asyncio.create_task(run("batch-b", "b"))
        await asyncio.sleep(0.1)
        assert not host.started["b"].is_set()
        host.finish["a"].set()
        await first
        await until(host.started["b"].is_set)
        assert busy() == 1, "the device computes the second batch"
        await asyncio.sleep(0.2)
        assert busy() == 1
        host.finish["b"].set()
        await second
        assert busy() == 0
        # The first held the device at least 0.1 s, the second 0.2 s; together never longer
        # than the wall time since the first started.
        assert 0.3 <= busy_seconds() - before <= time.monotonic() - t0
    finally:
        runtime.close()


def test_the_counter_is_credited_on_each_scrape_while_held() -> None:
    device = "busy-test-scrape"
    metrics.DEVICE_BUSY.declare([device])
    before = busy_seconds(device)
    metrics.DEVICE_BUSY.hold([device])
    try:
        time.sleep(0.2)
        # Read mid-hold: the time so far is there, not only once the batch ends.
        assert busy_seconds(device) - before >= 0.2
        assert busy(device) == 1
    finally:
        metrics.DEVICE_BUSY.release([device])
    assert busy(device) == 0


def test_holds_per_device_count_once_and_only_while_held() -> None:
    registry = CollectorRegistry()
    gauge = Gauge("g", "g", ["device"], registry=registry)
    seconds = Counter("s", "s", ["device"], registry=registry)
    now = [100.0]
    tracker = metrics.DeviceBusy(gauge, seconds, clock=lambda: now[0])
    tracker.declare(["d0", "d1"])
    assert registry.get_sample_value("s_total", {"device": "d1"}) == 0

    tracker.hold(["d0"])
    now[0] += 2
    tracker.hold(["d0", "d1"])  # d0 shared: busy once, not twice
    now[0] += 3
    tracker.credit()
    assert registry.get_sample_value("s_total", {"device": "d0"}) == 5
    assert registry.get_sample_value("s_total", {"device": "d1"}) == 3
    tracker.release(["d0"])
    assert registry.get_sample_value("g", {"device": "d0"}) == 1
    now[0] += 1
    tracker.release(["d0", "d1"])
    assert registry.get_sample_value("g", {"device": "d0"}) == 0
    assert registry.get_sample_value("g", {"device": "d1"}) == 0
    now[0] += 10  # idle time is not busy time
    tracker.credit()
    tracker.release(["d0"])  # an unmatched release changes nothing
    assert registry.get_sample_value("s_total", {"device": "d0"}) == 6
    assert registry.get_sample_value("s_total", {"device": "d1"}) == 4


def test_the_gate_reports_every_hand_over_in_order() -> None:
    seen: list[tuple[str | None, str | None]] = []
    gate = DeviceGate(on_hand_over=lambda previous, holder: seen.append((previous, holder)))
    gate.enqueue("a", Rank.NORMAL)
    gate.acquire("a")
    gate.enqueue("urgent", Rank.URGENT)
    # "a" steps aside at a step boundary; the urgent batch runs, then "a" takes it back.
    aside = threading.Thread(target=gate.step_aside, args=("a",))
    aside.start()
    gate.acquire("urgent")
    gate.release("urgent")
    aside.join(5)
    assert not aside.is_alive()
    gate.release("a")
    gate.release("a")  # not the holder any more: no hand-over
    assert seen == [
        (None, "a"),
        ("a", None),
        (None, "urgent"),
        ("urgent", None),
        (None, "a"),
        ("a", None),
    ]
