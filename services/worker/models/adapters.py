"""LoRA adapters on a loaded pipeline: loaded on first use, kept least recently used first.

Runs in the device thread only (the pipeline is not thread-safe): `activate` loads what a
group needs with diffusers' `load_lora_weights(adapter_name=...)`, evicts the least recently
used adapters beyond `max_loaded` with `delete_adapters`, and selects the group's set with
`set_adapters` (peft). A group without adapters runs with LoRA disabled. `loaded()` is the
one method other threads call: it reads a snapshot under a lock.

Loads never reach the network: a hub adapter loads from its cached snapshot folder, filled
by `mediamesh models pull` and checked at start by `hub_source.fetch_if_allowed`.

A load must leave the base model as it was: one that changes it (a Flux Control LoRA widens
the transformer's input layer, see `base_changes`) or fails halfway is undone, so that only
the job that asked for the adapter fails, and later jobs run on the model they always did.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from diffusers import DiffusionPipeline

from mediamesh.common.adapter_hub import is_hub_adapter
from mediamesh.common.adapters import AdapterSpec
from mediamesh.common.errors import FailedPrecondition, MeshError
from mediamesh.common.generation import AdapterScale
from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.base_changes import BaseSnapshot, widens_control_input
from mediamesh.worker.models.hub_source import adapter_missing_message, cached_adapter
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.models.out_of_memory import is_out_of_memory

log = logging.getLogger(__name__)


class AdapterLoadError(FailedPrecondition):
    """An adapter's weights could not be loaded; the message names the adapter and source.

    FAILED_PRECONDITION: the job was valid, the model's configuration is what is wrong."""


class BaseModelChanged(MeshError):
    """A LoRA load changed the base model and it could not be put back: every job of the
    model fails with this (INTERNAL) rather than on a tensor size, until a restart."""


# How torch words a tensor that does not fit its parameter (`load_state_dict`'s "size
# mismatch for ..."; other loaders name the shapes).
_SHAPE_MISMATCH = re.compile(r"size mismatch|shape", re.IGNORECASE)
# diffusers' default weight file names, in the order `load_lora_weights` tries them
# (after any other *.safetensors, then *.bin, in the folder).
_DEFAULT_WEIGHTS = ("pytorch_lora_weights.safetensors", "pytorch_lora_weights.bin")
# Files diffusers never takes for a LoRA's weights when it guesses in a folder.
_NOT_WEIGHTS = ("scheduler", "optimizer", "checkpoint")


def _missing_weights(source: Path, weight_name: str | None) -> str | None:
    """Why a folder `source` holds no weights diffusers would load, naming what it looks
    for; None for a file, a folder that has some, or an entry that names its file (then
    diffusers' own error names that file)."""
    if weight_name or not source.is_dir():
        return None
    found = [
        entry.name
        for entry in source.iterdir()
        if entry.is_file()
        and entry.name.endswith((".safetensors", ".bin"))
        and not any(word in entry.name for word in _NOT_WEIGHTS)
    ]
    if found:
        return None
    return (
        f"{source} holds no LoRA weights: looked for a *.safetensors file, then a *.bin file "
        f"({' or '.join(_DEFAULT_WEIGHTS)}); put the weights there or name the file in the "
        "adapter's weight_name"
    )


def _first_useful_line(text: str) -> str:
    """The line of a torch error that says what is wrong: "Error(s) in loading state_dict
    for Linear:" only introduces the "size mismatch for ..." lines that follow it."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    telling = [line for line in lines if not line.endswith(":")]
    return (telling or lines or [text])[0].rstrip(".")


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
        # Why the model is unusable: a load changed its base weights beyond putting back.
        self._broken = ""

    def loaded(self) -> list[tuple[str, float]]:
        """(name, load seconds) of the adapters loaded now, least recently used first."""
        with self._lock:
            return list(self._loaded.items())

    def activate(self, adapters: tuple[AdapterScale, ...]) -> None:
        """Make exactly `adapters`, at their scales, apply to the next pipeline call."""
        if self._broken:
            raise BaseModelChanged(self._broken)
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
        before = BaseSnapshot.take(self.pipeline)
        try:
            self.pipeline.load_lora_weights(str(source), adapter_name=name, **options)
        except Exception as exc:
            # A load that fails halfway may have widened layers already (see base_changes).
            self._undo(name, before)
            error = self._load_error(name, spec, source, exc)
            if error is exc:
                raise
            raise error from exc
        changes = before.changes(self.pipeline)
        if changes:
            self._undo(name, before)
            control = " (a Control LoRA)" if widens_control_input(changes) else ""
            raise AdapterLoadError(
                f"adapter {name!r} of model {self.spec.name!r} "
                f"(source {spec.resolved_source(self.models_dir)}) changes the base model: "
                f"{', '.join(changes)}{control}; not supported, so it was unloaded and the "
                "model left as it was"
            )
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

    def _undo(self, name: str, before: BaseSnapshot) -> None:
        """Takes the adapter `name` out again and puts back what its load changed in the base
        model; a model that cannot be put back fails every later job (`activate`)."""
        try:
            if self._present(name):
                self.pipeline.delete_adapters(name)
            before.restore(self.pipeline)
            left = before.changes(self.pipeline)
        except Exception as exc:
            log.exception("undoing the load of adapter %s of %s failed", name, self.spec.name)
            left = [f"undoing it failed: {exc}"]
        if left:
            self._broken = (
                f"model {self.spec.name!r} was changed by loading adapter {name!r} "
                f"({', '.join(left)}) and could not be put back; restart the worker"
            )
            log.error("%s", self._broken)

    def _load_error(
        self, name: str, adapter: AdapterSpec, source: Path, exc: Exception
    ) -> Exception:
        """The error a job gets for a load that raised `exc`: FAILED_PRECONDITION naming the
        adapter for a file that cannot be read or whose shapes do not fit the model; an
        allocation failure or anything unforeseen as it is."""
        where = f"adapter {name!r} of model {self.spec.name!r}"
        if isinstance(exc, OSError | ValueError):
            # diffusers names only the last file it tried ("no file named
            # pytorch_lora_weights.bin") when a folder has none, though it looked for
            # safetensors first.
            named = "no file named" in str(exc)
            missing = _missing_weights(source, adapter.weight_name) if named else None
            return AdapterLoadError(f"{where}: {missing or f'cannot load {source}: {exc}'}")
        if not isinstance(exc, RuntimeError) or is_out_of_memory(exc):
            return exc
        line = _first_useful_line(str(exc))
        if _SHAPE_MISMATCH.search(str(exc)):
            return AdapterLoadError(
                f"{where} (source {adapter.resolved_source(self.models_dir)}): its weights' "
                "shapes do not fit the model "
                f"({line}); is it a LoRA for another size of this model family?"
            )
        return AdapterLoadError(f"{where}: cannot load {source}: {line}")

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
