"""Audio has no width or height: its size multiple is 0, as its max_width and max_height are,
and ListModels says so rather than a rule of 16 px; nothing divides by that 0."""

from __future__ import annotations

from typing import Any

import pytest

from mediamesh.common.params import RequestFields, resolve
from mediamesh.common.registry import ModelSpec, RegistryError, load_registry, parse_registry
from mediamesh.scheduler.api.convert import list_models

AUDIO: dict[str, Any] = {
    "name": "a",
    "modality": "audio",
    "pipeline": "StableAudioPipeline",
    "source": "x",
    "defaults": {"duration_s": 1.0},
    "limits": {"max_duration_s": 10.0},
}


def test_list_models_reports_no_size_multiple_for_audio() -> None:
    registry = load_registry()
    by_name = {m.name: m.limits for m in list_models(registry.models, {}).models}
    for name in ("stable-audio-tiny", "audioldm2-tiny"):
        assert by_name[name].size_multiple == 0, name
        assert by_name[name].max_width == by_name[name].max_height == 0
    assert by_name["flux-tiny"].size_multiple == 16


def test_an_audio_entry_with_warmup_shapes_loads() -> None:
    (spec,) = parse_registry({"models": [{**AUDIO, "warmup": [{"duration_s": 2.0}]}]}).models
    assert spec.limits.size_multiple == 0 and len(spec.warmup) == 1


def test_an_audio_request_resolves() -> None:
    spec = load_registry().get("stable-audio-tiny")
    assert spec is not None
    params = resolve(spec, RequestFields(model=spec.name, prompt="waves", seed=1))
    assert (params.width, params.height, params.duration_s) == (0, 0, 1.0)


def test_a_dumped_audio_entry_and_the_image_default_read_back() -> None:
    spec = load_registry().get("stable-audio-tiny")
    assert spec is not None
    assert ModelSpec.model_validate(spec.model_dump()).limits.size_multiple == 0
    # An entry written before audio had no size multiple carries the image default.
    old = {**AUDIO, "limits": {**AUDIO["limits"], "size_multiple": 16}}
    assert parse_registry({"models": [old]}).models[0].limits.size_multiple == 0


def test_a_size_multiple_on_audio_is_refused_naming_it() -> None:
    entry = {**AUDIO, "limits": {**AUDIO["limits"], "size_multiple": 8}}
    with pytest.raises(RegistryError, match=r"limits.size_multiple: audio models have no width"):
        parse_registry({"models": [entry]})


def test_an_image_entry_needs_a_size_multiple() -> None:
    entry = {
        "name": "i",
        "modality": "image",
        "pipeline": "FluxPipeline",
        "source": "x",
        "defaults": {"width": 64, "height": 64},
        "limits": {"max_width": 128, "max_height": 128, "size_multiple": 0},
    }
    with pytest.raises(RegistryError, match=r"limits.size_multiple: image models need"):
        parse_registry({"models": [entry]})
