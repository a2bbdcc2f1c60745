"""LoRA adapters on a loaded pipeline: loaded on first use, kept least recently used first.

Runs in the device thread only (the pipeline is not thread-safe): `activate` loads what a
group needs with diffusers' `load_lora_weights(adapter_name=...)`, evicts the least recently
used adapters beyond `max_loaded` with `delete_adapters`, and selects the group's set with
`set_adapters` (peft). A group without adapters runs with LoRA disabled. `loaded()` is the
one method other threads call: it reads a snapshot under a lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from diffusers import DiffusionPipeline

from mediamesh.common.generation import AdapterScale
from mediamesh.common.registry import ModelSpec

log = logging.getLogger(__name__)


class AdapterLoadError(RuntimeError):
    """An adapter's weights could not be loaded; the message names the adapter and source."""


# Called after each load with (model, seconds): the worker's metrics.
LoadObserver = Callable[[str, float], None]


class AdapterCache:
    """The adapters of one model's pipeline, at most `max_loaded` kept between groups.

    A group that needs more adapters than `max_loaded` still runs: its own adapters are
    never evicted while it needs them, and the excess is evicted at the next group.
    """

    def __init__(
        self,
        spec: ModelSpec,
        pipeline: DiffusionPipeline,
        *,
        models_dir: Path,
        max_loaded: int,
        observe: LoadObserver | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.spec = spec
        self.pipeline = pipeline
        self.models_dir = models_dir
        self.max_loaded = max(max_loaded, 1)
        self._observe = observe
        self._clock = clock
        self._offered = {a.name: a for a in spec.adapters}
        # name -> seconds its load took; least recently used first.
        self._loaded: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()
        self._enabled = True
        # Loads done since start, for tests and the status of this cache.
        self.loads = 0

    def loaded(self) -> list[tuple[str, float]]:
        """(name, load seconds) of the adapters loaded now, least recently used first."""
        with self._lock:
            return list(self._loaded.items())

    def activate(self, adapters: tuple[AdapterScale, ...]) -> None:
        """Make exactly `adapters`, at their scales, apply to the next pipeline call."""
        if not adapters:
            if self._loaded and self._enabled:
                # Adapters stay loaded for later groups; they only stop applying.
                self.pipeline.disable_lora()
                self._enabled = False
            return
        names = [a.name for a in adapters]
        for name in names:
            self._ensure_loaded(name)
        self._evict(keep=set(names))
        if not self._enabled:
            self.pipeline.enable_lora()
            self._enabled = True
        self.pipeline.set_adapters(names, adapter_weights=[a.scale for a in adapters])

    def _ensure_loaded(self, name: str) -> None:
        if name in self._loaded:
            with self._lock:
                self._loaded.move_to_end(name)
            return
        spec = self._offered.get(name)
        if spec is None:
            raise AdapterLoadError(f"adapter {name!r} is not offered by model {self.spec.name!r}")
        source = spec.resolved_source(self.models_dir)
        options: dict[str, object] = {}
        if spec.weight_name:
            options["weight_name"] = spec.weight_name
        if Path(source).exists():
            options["local_files_only"] = True
        started = self._clock()
        try:
            self.pipeline.load_lora_weights(source, adapter_name=name, **options)
        except (OSError, ValueError) as exc:
            raise AdapterLoadError(
                f"adapter {name!r} of model {self.spec.name!r}: cannot load {source}: {exc}"
            ) from exc
        seconds = self._clock() - started
        self.loads += 1
        with self._lock:
            self._loaded[name] = seconds
        log.info("loaded adapter %s of %s in %.3fs", name, self.spec.name, seconds)
        if self._observe is not None:
            self._observe(self.spec.name, seconds)

    def _evict(self, keep: set[str]) -> None:
        while len(self._loaded) > self.max_loaded:
            victim = next((n for n in self._loaded if n not in keep), None)
            if victim is None:
                return
            self.pipeline.delete_adapters(victim)
            with self._lock:
                del self._loaded[victim]
            log.info("evicted adapter %s of %s", victim, self.spec.name)
