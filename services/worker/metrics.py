"""Worker metrics (documented in the README)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, Metric

STEP_SECONDS = Histogram(
    "mediamesh_worker_step_seconds",
    "Wall time of one denoising step of a batch.",
    ["model"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
BATCH_SECONDS = Histogram(
    "mediamesh_worker_batch_seconds",
    "Wall time of a whole batch, encoding included.",
    ["model"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
JOBS = Counter("mediamesh_worker_jobs", "Jobs ended on this worker, by outcome.", ["model", "code"])
CHECKPOINTS = Counter("mediamesh_worker_checkpoints", "Checkpoints written, by reason.", ["reason"])
DEVICE_MEMORY = Gauge("mediamesh_worker_device_memory_bytes", "Device memory in use.", ["device"])
DEVICE_MEMORY_TOTAL = Gauge(
    "mediamesh_worker_device_memory_total_bytes", "Device memory in all.", ["device"]
)
DEVICE_MEMORY_FREE = Gauge(
    "mediamesh_worker_device_memory_free_bytes",
    "Device memory free (on CUDA as the driver reports it, torch.cuda.mem_get_info).",
    ["device"],
)
DEVICE_UTILIZATION = Gauge(
    "mediamesh_worker_device_busy_ratio",
    "1 while a batch holds the device, 0 when idle (avg_over_time() for utilisation; "
    "mediamesh_worker_device_busy_seconds_total with rate() sees every hold between scrapes).",
    ["device"],
)


class _OnScrape:
    """A collector that exposes nothing and calls `action` whenever the registry is read."""

    def __init__(self, action: Callable[[], None]) -> None:
        self._action = action

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        self._action()
        return []


# Registered before the counter: a scrape collects in registration order, so the hold in
# progress is credited first and a batch that holds the device for minutes shows as busy
# all along rather than in one jump when it ends.
REGISTRY.register(_OnScrape(lambda: DEVICE_BUSY.credit()))
DEVICE_BUSY_SECONDS = Counter(
    "mediamesh_worker_device_busy_seconds",
    "Seconds a batch held the device (rate() is the busy ratio).",
    ["device"],
)


class DeviceBusy:
    """Publishes which devices a batch holds: the busy gauge and the busy-seconds counter.

    Holds are counted per device, so a device shared by two runtimes of one process (the
    in-process test meshes) is busy while either holds it and its seconds never add up
    to more than the wall time.
    """

    def __init__(
        self, gauge: Gauge, seconds: Counter, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._gauge = gauge
        self._seconds = seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._holders: dict[str, int] = {}
        # When each held device's time was last added to the counter.
        self._credited_at: dict[str, float] = {}

    def declare(self, devices: Iterable[str]) -> None:
        """Idle series for `devices`, so the first hold shows in rate()."""
        with self._lock:
            for device in devices:
                if not self._holders.get(device):
                    self._gauge.labels(device).set(0)
                self._seconds.labels(device)

    def hold(self, devices: Iterable[str]) -> None:
        with self._lock:
            now = self._clock()
            for device in devices:
                count = self._holders.get(device, 0)
                if count == 0:
                    self._credited_at[device] = now
                    self._gauge.labels(device).set(1)
                self._holders[device] = count + 1

    def release(self, devices: Iterable[str]) -> None:
        with self._lock:
            now = self._clock()
            for device in devices:
                count = self._holders.get(device, 0)
                if count == 0:
                    continue
                if count == 1:
                    self._credit(device, now)
                    del self._credited_at[device]
                    self._gauge.labels(device).set(0)
                self._holders[device] = count - 1

    def credit(self) -> None:
        """Add the time of the holds in progress to the counter."""
        with self._lock:
            now = self._clock()
            for device in self._credited_at:
                self._credit(device, now)

    def _credit(self, device: str, now: float) -> None:
        self._seconds.labels(device).inc(max(0.0, now - self._credited_at[device]))
        self._credited_at[device] = now


# Annotated: the scrape hook above names it before it exists, and mypy cannot infer it there.
DEVICE_BUSY: DeviceBusy = DeviceBusy(DEVICE_UTILIZATION, DEVICE_BUSY_SECONDS)
ADAPTER_LOADS = Counter(
    "mediamesh_adapter_loads",
    "LoRA adapters loaded into a model's pipeline (first use, or again after an eviction).",
    ["model"],
)
ADAPTER_LOAD_SECONDS = Histogram(
    "mediamesh_adapter_load_seconds",
    "Wall time of one LoRA adapter load.",
    ["model"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
MODEL_LOADS = Counter(
    "mediamesh_model_loads",
    "Model weight loads on this worker: at start, and each cold start after an eviction.",
    ["model"],
)
MODEL_LOAD_SECONDS = Histogram(
    "mediamesh_model_load_seconds",
    "Wall time of one model load.",
    ["model"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
RESIDENT_MODELS = Gauge(
    "mediamesh_worker_resident_models", "Hosted models whose weights are loaded now."
)
