"""LoRA adapters on a loaded pipeline: loaded on first use, kept least recently used first.

Runs in the device thread only (the pipeline is not thread-safe): `activate` loads what a
group needs with diffusers' `load_lora_weights(adapter_name=...)`, evicts the least recently
used adapters beyond `max_loaded` with `delete_adapters`, and selects the group's set with
`set_adapters` (peft). A group without adapters runs with LoRA disabled. `loaded()` is the
one method other threads call: it reads a snapshot under a lock.

Loads never reach the network: a hub adapter loads from its cached snapshot folder, filled
by `mediamesh models pull` and checked at start by `hub_source.fetch_if_allowed`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from diffusers import DiffusionPipeline

from mediamesh.common.adapter_hub import is_hub_adapter
from mediamesh.common.adapters import AdapterSpec
from mediamesh.common.errors import FailedPrecondition
from mediamesh.common.generation import AdapterScale
from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.hub_source import adapter_missing_message, cached_adapter
from mediamesh.worker.models.memory import ModelLoadError

log = logging.getLogger(__name__)


class AdapterLoadError(FailedPrecondition):
    """An adapter's weights could not be loaded; the message names the adapter and source.

    FAILED_PRECONDITION: the job was valid, the model's configuration is what is wrong."""


def refuse_unusable_adapters(spec: ModelSpec, models_dir: Path) -> None:
    """ModelLoadError, one line naming the model and adapter, for adapters a worker could
    never apply: on a pipeline class without LoRA support, or from a local path that does
    not exist. Checked at start so that no job finds out (hub adapters: `hub_source`)."""
    if not spec.adapters:
        return
    if not _supports_lora(spec.pipeline):
        raise ModelLoadError(_no_lora_message(spec))
    for adapter in spec.adapters:
        if is_hub_adapter(adapter, models_dir):
            continue
        if not local_adapter_path(adapter, models_dir).exists():
            raise ModelLoadError(_missing_path_message(spec, adapter, models_dir))


def local_adapter_path(adapter: AdapterSpec, models_dir: Path) -> Path:
    """The file or folder of an adapter that is not a hub id."""
    return Path(adapter.resolved_source(models_dir)).expanduser()


def _supports_lora(pipeline: str) -> bool:
    import diffusers

    pipeline_class = getattr(diffusers, pipeline, None)
    if pipeline_class is None and pipeline != "Echo":
        # Not a diffusers class at all: its load says so, better than a word on adapters.
        return True
    return callable(getattr(pipeline_class, "load_lora_weights", None))


def _no_lora_message(spec: ModelSpec) -> str:
    return (
        f"model {spec.name!r} field adapters: pipeline {spec.pipeline} cannot load LoRA "
        "adapters; remove `adapters` from the entry"
    )


def _missing_path_message(spec: ModelSpec, adapter: AdapterSpec, models_dir: Path) -> str:
    built = " (`mediamesh models build` writes the tiny models' adapters)"
    hint = built if "{models_dir}" in adapter.source else ""
    return (
        f"model {spec.name!r} adapter {adapter.name!r}: {adapter.resolved_source(models_dir)} "
        f"does not exist; put the LoRA there or fix the adapter's source{hint}"
    )


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
        if not callable(getattr(pipeline, "load_lora_weights", None)):
            raise ModelLoadError(_no_lora_message(spec))
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
        source = self._local_source(spec)
        # Even a folder is read with local_files_only: a missing file must fail here, not
        # send diffusers to the hub to look for it.
        options: dict[str, object] = {"local_files_only": True}
        if spec.weight_name:
            options["weight_name"] = spec.weight_name
        started = self._clock()
        try:
            self.pipeline.load_lora_weights(str(source), adapter_name=name, **options)
        except (OSError, ValueError) as exc:
            raise AdapterLoadError(
                f"adapter {name!r} of model {self.spec.name!r}: cannot load {source}: {exc}"
            ) from exc
        if not self._present(name):
            # diffusers loads a LoRA whose keys match no layer without a word; set_adapters
            # would then fail with a bare ValueError.
            raise AdapterLoadError(
                f"adapter {name!r} of model {self.spec.name!r} "
                f"(source {spec.resolved_source(self.models_dir)}) matched "
                "none of the model's layers; is it a LoRA for this model family?"
            )
        seconds = self._clock() - started
        self.loads += 1
        with self._lock:
            self._loaded[name] = seconds
        log.info("loaded adapter %s of %s in %.3fs", name, self.spec.name, seconds)
        if self._observe is not None:
            self._observe(self.spec.name, seconds)

    def _local_source(self, adapter: AdapterSpec) -> Path:
        if is_hub_adapter(adapter, self.models_dir):
            snapshot = cached_adapter(adapter)
            if snapshot is None:
                raise AdapterLoadError(adapter_missing_message(self.spec, adapter))
            return snapshot
        path = local_adapter_path(adapter, self.models_dir)
        if not path.exists():
            raise AdapterLoadError(_missing_path_message(self.spec, adapter, self.models_dir))
        return path

    def _present(self, name: str) -> bool:
        by_component: dict[str, list[str]] = self.pipeline.get_list_adapters()
        return any(name in names for names in by_component.values())

    def _evict(self, keep: set[str]) -> None:
        while len(self._loaded) > self.max_loaded:
            victim = next((n for n in self._loaded if n not in keep), None)
            if victim is None:
                return
            self.pipeline.delete_adapters(victim)
            with self._lock:
                del self._loaded[victim]
            log.info("evicted adapter %s of %s", victim, self.spec.name)
