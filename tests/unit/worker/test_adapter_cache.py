"""The worker's adapter cache against a hand-written pipeline that records what it is told:
loads on first use, least-recently-used eviction, LoRA off for groups without adapters."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.common.generation import AdapterScale
from mediamesh.common.registry import load_registry
from mediamesh.worker.models.adapters import AdapterCache, AdapterLoadError


class RecordingPipeline:
    """The LoRA methods of a diffusers pipeline, as calls written down."""

    def __init__(self, fail_on: str = "") -> None:
        self.calls: list[tuple] = []
        self.fail_on = fail_on

    def load_lora_weights(self, source: str, adapter_name: str, **options: object) -> None:
        if adapter_name == self.fail_on:
            raise OSError("no such file")
        self.calls.append(("load", adapter_name, source, tuple(sorted(options))))

    def set_adapters(self, names: list[str], adapter_weights: list[float]) -> None:
        self.calls.append(("set", tuple(names), tuple(adapter_weights)))

    def delete_adapters(self, name: str) -> None:
        self.calls.append(("delete", name))

    def disable_lora(self) -> None:
        self.calls.append(("disable",))

    def enable_lora(self) -> None:
        self.calls.append(("enable",))


SPEC = load_registry().get("flux-tiny")


def cache(pipeline: RecordingPipeline, max_loaded: int, observed: list | None = None):
    ticks = iter(range(100))
    return AdapterCache(
        SPEC,
        pipeline,  # type: ignore[arg-type]
        models_dir=Path("/models"),
        max_loaded=max_loaded,
        observe=(lambda model, s: observed.append((model, s))) if observed is not None else None,
        clock=lambda: float(next(ticks)),
    )


def test_first_use_loads_then_reuses_and_reports_load_seconds() -> None:
    pipeline, observed = RecordingPipeline(), []
    adapters = cache(pipeline, 4, observed)
    adapters.activate((AdapterScale("style", 0.5),))
    adapters.activate((AdapterScale("style", 1.0),))
    assert pipeline.calls == [
        ("load", "style", "/models/flux-tiny-lora-style", ()),
        ("set", ("style",), (0.5,)),
        ("set", ("style",), (1.0,)),
    ]
    assert adapters.loaded() == [("style", 1.0)] and adapters.loads == 1
    assert observed == [("flux-tiny", 1.0)]


def test_lora_is_disabled_for_a_group_without_adapters_and_enabled_again() -> None:
    pipeline = RecordingPipeline()
    adapters = cache(pipeline, 4)
    adapters.activate(())  # nothing loaded yet: nothing to turn off
    adapters.activate((AdapterScale("style", 1.0),))
    adapters.activate(())
    adapters.activate(())
    adapters.activate((AdapterScale("style", 1.0),))
    kinds = [call[0] for call in pipeline.calls]
    assert kinds == ["load", "set", "disable", "enable", "set"]


def test_least_recently_used_is_evicted_beyond_the_limit() -> None:
    pipeline = RecordingPipeline()
    adapters = cache(pipeline, 1)
    for name in ("style", "style2", "style"):
        adapters.activate((AdapterScale(name, 1.0),))
    assert [c for c in pipeline.calls if c[0] in ("load", "delete")] == [
        ("load", "style", "/models/flux-tiny-lora-style", ()),
        ("load", "style2", "/models/flux-tiny-lora-style2", ()),
        ("delete", "style"),
        ("load", "style", "/models/flux-tiny-lora-style", ()),
        ("delete", "style2"),
    ]
    assert [name for name, _ in adapters.loaded()] == ["style"] and adapters.loads == 3


def test_a_group_needing_more_than_the_limit_keeps_its_own_until_the_next() -> None:
    pipeline = RecordingPipeline()
    adapters = cache(pipeline, 1)
    adapters.activate((AdapterScale("style", 1.0), AdapterScale("style2", 0.5)))
    assert ("set", ("style", "style2"), (1.0, 0.5)) in pipeline.calls
    assert not [c for c in pipeline.calls if c[0] == "delete"]
    adapters.activate((AdapterScale("style2", 1.0),))
    assert ("delete", "style") in pipeline.calls


def test_a_load_failure_names_the_adapter_and_its_source() -> None:
    adapters = cache(RecordingPipeline(fail_on="style2"), 4)
    expected = "adapter 'style2' of model 'flux-tiny': cannot load /models/flux-tiny-lora-style2"
    with pytest.raises(AdapterLoadError, match=expected):
        adapters.activate((AdapterScale("style2", 1.0),))
    assert adapters.loaded() == []
