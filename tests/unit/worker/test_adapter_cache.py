"""The worker's adapter cache against a hand-written pipeline that records what it is told:
loads on first use, least-recently-used eviction, LoRA off for groups without adapters,
loads that never reach the hub, and adapters that load but match nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.common.errors import StatusCode
from mediamesh.common.generation import AdapterScale
from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.worker.models.adapters import AdapterCache, AdapterLoadError
from mediamesh.worker.models.memory import ModelLoadError
from tests.hub_cache import add_to_hub_cache

OFFLINE = ("local_files_only",)


class RecordingPipeline:
    """The LoRA methods of a diffusers pipeline, as calls written down."""

    def __init__(self, fail_on: str = "", matches_nothing: str = "") -> None:
        self.calls: list[tuple] = []
        self.fail_on = fail_on
        # An adapter diffusers "loads" without error although none of its keys matched.
        self.matches_nothing = matches_nothing
        self.present: list[str] = []

    def load_lora_weights(self, source: str, adapter_name: str, **options: object) -> None:
        if adapter_name == self.fail_on:
            raise OSError("no such file")
        self.calls.append(("load", adapter_name, source, tuple(sorted(options))))
        if adapter_name != self.matches_nothing:
            self.present.append(adapter_name)

    def get_list_adapters(self) -> dict[str, list[str]]:
        return {"transformer": list(self.present)} if self.present else {}

    def set_adapters(self, names: list[str], adapter_weights: list[float]) -> None:
        self.calls.append(("set", tuple(names), tuple(adapter_weights)))

    def delete_adapters(self, name: str) -> None:
        self.calls.append(("delete", name))
        self.present.remove(name)

    def disable_lora(self) -> None:
        self.calls.append(("disable",))

    def enable_lora(self) -> None:
        self.calls.append(("enable",))


SPEC = load_registry().get("flux-tiny")


def with_adapters(*adapters: dict) -> ModelSpec:
    return ModelSpec.model_validate({**SPEC.model_dump(), "adapters": list(adapters)})


@pytest.fixture
def models(tmp_path: Path) -> Path:
    """A models folder holding the flux-tiny entry's adapter folders (empty: the recording
    pipeline reads nothing)."""
    for adapter in SPEC.adapters:
        Path(adapter.resolved_source(tmp_path)).mkdir()
    return tmp_path


def cache(
    pipeline: RecordingPipeline,
    max_loaded: int,
    observed: list | None = None,
    *,
    models: Path,
    spec: ModelSpec = SPEC,
):
    ticks = iter(range(100))
    return AdapterCache(
        spec,
        pipeline,  # type: ignore[arg-type]
        models_dir=models,
        max_loaded=max_loaded,
        observe=(lambda model, s: observed.append((model, s))) if observed is not None else None,
        clock=lambda: float(next(ticks)),
    )


def test_first_use_loads_then_reuses_and_reports_load_seconds(models: Path) -> None:
    pipeline, observed = RecordingPipeline(), []
    adapters = cache(pipeline, 4, observed, models=models)
    adapters.activate((AdapterScale("style", 0.5),))
    adapters.activate((AdapterScale("style", 1.0),))
    assert pipeline.calls == [
        ("load", "style", f"{models}/flux-tiny-lora-style", OFFLINE),
        ("set", ("style",), (0.5,)),
        ("set", ("style",), (1.0,)),
    ]
    assert adapters.loaded() == [("style", 1.0)] and adapters.loads == 1
    assert observed == [("flux-tiny", 1.0)]


def test_lora_is_disabled_for_a_group_without_adapters_and_enabled_again(models: Path) -> None:
    pipeline = RecordingPipeline()
    adapters = cache(pipeline, 4, models=models)
    adapters.activate(())  # nothing loaded yet: nothing to turn off
    adapters.activate((AdapterScale("style", 1.0),))
    adapters.activate(())
    adapters.activate(())
    adapters.activate((AdapterScale("style", 1.0),))
    kinds = [call[0] for call in pipeline.calls]
    assert kinds == ["load", "set", "disable", "enable", "set"]


def test_least_recently_used_is_evicted_beyond_the_limit(models: Path) -> None:
    pipeline = RecordingPipeline()
    adapters = cache(pipeline, 1, models=models)
    for name in ("style", "style2", "style"):
        adapters.activate((AdapterScale(name, 1.0),))
    assert [c for c in pipeline.calls if c[0] in ("load", "delete")] == [
        ("load", "style", f"{models}/flux-tiny-lora-style", OFFLINE),
        ("load", "style2", f"{models}/flux-tiny-lora-style2", OFFLINE),
        ("delete", "style"),
        ("load", "style", f"{models}/flux-tiny-lora-style", OFFLINE),
        ("delete", "style2"),
    ]
    assert [name for name, _ in adapters.loaded()] == ["style"] and adapters.loads == 3


def test_a_group_needing_more_than_the_limit_keeps_its_own_until_the_next(models: Path) -> None:
    pipeline = RecordingPipeline()
    adapters = cache(pipeline, 1, models=models)
    adapters.activate((AdapterScale("style", 1.0), AdapterScale("style2", 0.5)))
    assert ("set", ("style", "style2"), (1.0, 0.5)) in pipeline.calls
    assert not [c for c in pipeline.calls if c[0] == "delete"]
    adapters.activate((AdapterScale("style2", 1.0),))
    assert ("delete", "style") in pipeline.calls


def test_a_load_failure_names_the_adapter_and_its_source(models: Path) -> None:
    adapters = cache(RecordingPipeline(fail_on="style2"), 4, models=models)
    expected = f"adapter 'style2' of model 'flux-tiny': cannot load {models}/flux-tiny-lora-style2"
    with pytest.raises(AdapterLoadError, match=expected):
        adapters.activate((AdapterScale("style2", 1.0),))
    assert adapters.loaded() == []


def test_an_adapter_that_matched_no_layer_fails_naming_it_not_at_set_adapters(
    models: Path,
) -> None:
    pipeline = RecordingPipeline(matches_nothing="style2")
    adapters = cache(pipeline, 4, models=models)
    with pytest.raises(AdapterLoadError) as raised:
        adapters.activate((AdapterScale("style2", 1.0),))
    assert str(raised.value) == (
        f"adapter 'style2' of model 'flux-tiny' (source {models}/flux-tiny-lora-style2) "
        "matched none of the model's layers; is it a LoRA for this model family?"
    )
    assert raised.value.code == StatusCode.FAILED_PRECONDITION
    assert adapters.loaded() == [] and not [c for c in pipeline.calls if c[0] == "set"]


def test_a_missing_local_adapter_is_named_as_a_path_not_a_hub_id(tmp_path: Path) -> None:
    spec = with_adapters({"name": "missing", "source": str(tmp_path / "no-such-lora")})
    pipeline = RecordingPipeline()
    adapters = cache(pipeline, 4, models=tmp_path, spec=spec)
    with pytest.raises(AdapterLoadError, match=f"'missing': {tmp_path}/no-such-lora does not"):
        adapters.activate((AdapterScale("missing", 1.0),))
    assert pipeline.calls == []


def test_a_cached_hub_adapter_loads_from_its_snapshot_folder_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants

    lora = tmp_path / "lora"
    lora.mkdir()
    (lora / "pytorch_lora_weights.safetensors").write_bytes(b"weights")
    snapshot = add_to_hub_cache(tmp_path / "cache", "someorg/some-lora", lora)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    spec = with_adapters(
        {"name": "hubby", "source": "someorg/some-lora"},
        {"name": "absent", "source": "someorg/not-pulled"},
    )
    pipeline = RecordingPipeline()
    adapters = cache(pipeline, 4, models=tmp_path, spec=spec)
    adapters.activate((AdapterScale("hubby", 1.0),))
    # A folder, not the hub id: diffusers never asks the hub which weights file it has.
    assert pipeline.calls[0] == ("load", "hubby", str(snapshot), OFFLINE)
    with pytest.raises(AdapterLoadError, match="run `mediamesh models pull flux-tiny` first"):
        adapters.activate((AdapterScale("absent", 1.0),))
    assert len([c for c in pipeline.calls if c[0] == "load"]) == 1


def test_a_pipeline_without_lora_support_is_refused_when_the_cache_is_attached(
    models: Path,
) -> None:
    class NoLora:
        pass

    with pytest.raises(ModelLoadError, match="model 'flux-tiny' field adapters: pipeline"):
        AdapterCache(SPEC, NoLora(), models_dir=models, max_loaded=4)  # type: ignore[arg-type]
