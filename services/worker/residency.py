"""Model residency: a worker that hosts more models than it keeps loaded.

With `max_resident_models` or `max_resident_bytes` set, every single-device (data mode)
model is hosted through a `ResidentHost`: the worker serves all of them, keeps at most the
limit loaded, and loads a cold one when a batch needs it, first evicting the least recently
used models that no batch is using. Loading happens inside the batch's `run_batch`, so in
the device thread while the batch holds the device gate, never on the event loop. Models in
a parallel mode load at start and stay resident (they own several devices and processes).

A model's warm-up shapes run once per load, before the first batch on it: compiled graphs
and autotuned kernels go with the evicted weights, so a reload would otherwise make its
first user batch pay for them again. The models loaded at start are warmed by the
worker's start-up warm-up instead, while it still reports itself warming.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mediamesh.common.errors import StatusCode
from mediamesh.common.hub import cached_snapshot
from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import JobFailed, JobParams
from mediamesh.worker.core.batch import ControlView, Emit
from mediamesh.worker.models.host import ModelHost
from mediamesh.worker.models.memory import DTYPE_BYTES, ModelLoadError, checkpoint_parameters

log = logging.getLogger("mediamesh.worker")


@dataclass(frozen=True)
class ResidencyLimits:
    """How many models, and how many weight bytes, may be loaded at once (0: no limit)."""

    max_models: int = 0
    max_bytes: int = 0

    @property
    def limited(self) -> bool:
        """Whether any limit applies (without one every model loads at start and stays)."""
        return self.max_models > 0 or self.max_bytes > 0


class LoadRefused(Exception):
    """A cold model that cannot load here whatever is evicted: its entry or the worker's
    limits are at fault, so retrying the job would fail the same way."""


class Residency:
    """Which hosted models are loaded, how long each load took, and the LRU eviction.

    `load` builds a model's host (blocking torch work), `size_of` estimates its weight
    bytes, `observe` is told each measured load (model, seconds) for the metrics, `warm`
    runs a loaded host's warm-up shapes (blocking; None: no warm-up), and `check` raises
    ModelLoadError for what would make a load fail without reading weights (None: nothing
    to check), run before anything is evicted for that load.
    """

    def __init__(
        self,
        limits: ResidencyLimits,
        load: Callable[[ModelSpec], ModelHost],
        size_of: Callable[[ModelSpec], int],
        observe: Callable[[str, float], None],
        warm: Callable[[ModelHost], None] | None = None,
        check: Callable[[ModelSpec], None] | None = None,
    ) -> None:
        self.limits = limits
        self._load = load
        self._check = check
        self._size_of = size_of
        self._observe = observe
        self._warm = warm
        # Serialises loads and evictions; readers of the snapshot below never wait on it.
        self._loading = threading.Lock()
        # Managed models loaded now, least recently used first.
        self._loaded: OrderedDict[str, ModelHost] = OrderedDict()
        self._bytes: dict[str, int] = {}
        self._in_use: Counter[str] = Counter()
        # Loaded managed models whose warm-up has run since their load.
        self._warmed: set[str] = set()
        # Every model's last measured load seconds, managed or pinned, with the warm-up run
        # for that load: a batch sent to a cold model waits for both. Read-only outside.
        self.load_seconds: dict[str, float] = {}
        # Loads per model since start (the first one included); read-only outside.
        self.loads: Counter[str] = Counter()
        self._pinned: set[str] = set()
        # Models hosted through a ResidentHost, loaded or not.
        self._managed: set[str] = set()
        self._sizes: dict[str, int] = {}

    def size_of(self, spec: ModelSpec) -> int:
        """Estimated weight bytes of `spec`, as counted against `max_resident_bytes`."""
        size = self._sizes.get(spec.name)
        if size is None:
            size = self._sizes[spec.name] = self._size_of(spec)
        return size

    def manage(self, name: str) -> None:
        """A model hosted cold until a batch (or the start-up preload) needs it."""
        self._managed.add(name)

    def pin(self, name: str, seconds: float) -> None:
        """A model loaded at start outside the limits (a parallel mode): always resident."""
        self._pinned.add(name)
        self.load_seconds[name] = seconds
        self.loads[name] += 1
        self._observe(name, seconds)

    def is_resident(self, name: str) -> bool:
        """Whether `name`'s weights are loaded now."""
        return name in self._pinned or name in self._loaded

    def snapshot(self) -> dict[str, tuple[bool, float]]:
        """Per known model: (resident now, last load seconds); safe from any thread."""
        names = self._managed | self._pinned
        return {n: (self.is_resident(n), self.load_seconds.get(n, 0.0)) for n in names}

    def loaded_host(self, name: str) -> ModelHost | None:
        """The loaded host of a managed model, or None while it is cold."""
        return self._loaded.get(name)

    def acquire(self, spec: ModelSpec, *, warm: bool = True) -> ModelHost:
        """The loaded host of `spec`, loading it (after evictions) if cold and running its
        warm-up if it has not run since that load; blocking, for the device thread. Pair
        with `release` once the batch is done with it. `warm=False` (the start-up preload)
        leaves the warm-up to `warm_loaded`."""
        name = spec.name
        with self._loading:
            host = self._loaded.get(name)
            if host is None:
                size = self.size_of(spec)
                # Before any eviction: a load that cannot work must not cost another
                # model its place.
                self._refuse_unloadable(spec, size)
                self._make_room(incoming_bytes=size)
                started = time.perf_counter()
                host = self._load(spec)
                seconds = time.perf_counter() - started
                self._loaded[name] = host
                self._bytes[name] = size
                self.load_seconds[name] = seconds
                self.loads[name] += 1
                self._observe(name, seconds)
                log.info("loaded %s in %.2f s (%d resident)", name, seconds, len(self._loaded))
            if warm:
                self._warm_up(spec, host)
            self._loaded.move_to_end(name)
            self._in_use[name] += 1
            return host

    def warm_loaded(self, spec: ModelSpec) -> bool:
        """Runs `spec`'s warm-up on its loaded host if it has not run since the load
        (blocking, for the device thread); False while the model is cold, since it warms
        when a batch loads it."""
        with self._loading:
            host = self._loaded.get(spec.name)
            if host is None:
                return False
            self._warm_up(spec, host)
            return True

    def _warm_up(self, spec: ModelSpec, host: ModelHost) -> None:
        name = spec.name
        if self._warm is None or not spec.warmup or name in self._warmed:
            return
        # Marked first: a warm-up that raised is not retried before every batch.
        self._warmed.add(name)
        started = time.perf_counter()
        try:
            self._warm(host)
        except Exception:
            log.exception("warm-up of %s failed; it serves unwarmed", name)
        took = time.perf_counter() - started
        self.load_seconds[name] = self.load_seconds.get(name, 0.0) + took
        log.info("warmed %s in %.2f s", name, took)

    def release(self, name: str) -> None:
        """A batch is done with `name`'s host: it may be evicted again. The last batch of a
        model to end brings the worker back within its limits, which a model kept past them
        for a paused batch had exceeded, rather than waiting for the next cold load."""
        with self._loading:
            self._in_use[name] -= 1
            if self._in_use[name] <= 0:
                del self._in_use[name]
                self._make_room()

    def _refuse_unloadable(self, spec: ModelSpec, size: int) -> None:
        limit = self.limits.max_bytes
        if limit and size > limit:
            raise LoadRefused(
                f"model {spec.name!r}: its estimated {size} weight bytes exceed the worker's "
                f"max_resident_bytes ({limit}) on their own"
            )
        if self._check is None:
            return
        try:
            self._check(spec)
        except ModelLoadError as exc:
            raise LoadRefused(str(exc)) from exc

    def _make_room(self, *, incoming_bytes: int | None = None) -> None:
        """Evicts least recently used idle models until the loaded ones, with an incoming
        model of `incoming_bytes` (None: none), fit the limits. A model a batch is using (one
        paused at a step boundary) stays: the worker then holds one model more than the
        limit until that batch ends, rather than fail either batch."""
        limits = self.limits
        incoming_models = 0 if incoming_bytes is None else 1
        for name in list(self._loaded):
            over_count = (
                limits.max_models and len(self._loaded) + incoming_models > limits.max_models
            )
            loaded_bytes = sum(self._bytes.values()) + (incoming_bytes or 0)
            over_bytes = limits.max_bytes and loaded_bytes > limits.max_bytes
            if not (over_count or over_bytes):
                return
            if not self._in_use[name]:
                self._evict(name)

    def _evict(self, name: str) -> None:
        host = self._loaded.pop(name)
        self._bytes.pop(name, None)
        self._warmed.discard(name)
        try:
            host.close()
        except Exception:
            log.exception("closing %s on eviction failed", name)
        del host
        _free_device_memory()
        log.info("evicted %s (least recently used)", name)

    def unload(self, name: str) -> None:
        """Unloads a managed model if it is loaded (the worker is stopping)."""
        with self._loading:
            if name in self._loaded:
                self._evict(name)


def _free_device_memory() -> None:
    # The pipeline's modules are only freed once nothing refers to them; the CUDA caching
    # allocator then still holds their blocks until emptied.
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class ResidentHost:
    """A hosted model that may be cold: loads through the Residency on a batch's behalf.

    A failed load fails the batch's jobs rather than raise (only a lost device raises, as
    the host contract says): FAILED_PRECONDITION when the entry or the worker's limits
    refuse the load, which no retry changes; UNAVAILABLE when the load itself failed (out of
    memory, unreadable files), which a later try may get past."""

    def __init__(self, spec: ModelSpec, device: str, residency: Residency) -> None:
        self.spec = spec
        self.device_ids = [device]
        self._residency = residency
        residency.manage(spec.name)

    @property
    def adapters(self) -> object | None:
        """The loaded host's LoRA adapter cache (None while the model is cold)."""
        host = self._residency.loaded_host(self.spec.name)
        return getattr(host, "adapters", None) if host is not None else None

    def run_batch(self, jobs: list[JobParams], control: ControlView, emit: Emit) -> None:
        """Loads the model if it is cold, then runs the batch on it."""
        try:
            host = self._residency.acquire(self.spec)
        except LoadRefused as exc:
            log.error("cannot load %s for a batch: %s", self.spec.name, exc)
            for job in jobs:
                emit(JobFailed(job.job_id, StatusCode.FAILED_PRECONDITION, str(exc)))
            return
        except Exception as exc:
            log.exception("loading %s for a batch failed", self.spec.name)
            for job in jobs:
                emit(
                    JobFailed(
                        job.job_id,
                        StatusCode.UNAVAILABLE,
                        f"model {self.spec.name!r} could not be loaded: {exc}",
                    )
                )
            return
        try:
            host.run_batch(jobs, control, emit)
        finally:
            self._residency.release(self.spec.name)

    def warm_if_loaded(self) -> bool:
        """Runs the model's warm-up now if it is loaded and not yet warmed since; False while
        it is cold (the batch that loads it warms it first)."""
        return self._residency.warm_loaded(self.spec)

    def close(self) -> None:
        """Unloads the model's weights if they are loaded."""
        self._residency.unload(self.spec.name)


def estimate_weight_bytes(spec: ModelSpec, models_dir: Path) -> int:
    """Bytes of a model's weights in its dtype, from its checkpoint's headers (0 when it
    has no local checkpoint, as the builtin Echo)."""
    if spec.pipeline == "Echo":
        return 0
    source = Path(spec.resolved_source(models_dir))
    local_dir = source if source.is_dir() else cached_snapshot(spec)
    if local_dir is None:
        return 0
    return checkpoint_parameters(spec.name, local_dir, str(source)) * DTYPE_BYTES[spec.dtype]


def residency_report(
    hosts: Mapping[str, ModelHost], residency: Residency | None
) -> dict[str, tuple[bool, float]]:
    """Per hosted model: (resident now, last measured load seconds)."""
    known = residency.snapshot() if residency is not None else {}
    return {name: known.get(name, (True, 0.0)) for name in hosts}
