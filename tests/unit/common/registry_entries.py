"""Minimal registry entries of each modality, and how a test reads a refusal or acceptance
of one with some of its fields changed."""

from __future__ import annotations

from typing import Any

import pytest

from mediamesh.common.registry import ModelSpec, RegistryError, parse_registry

IMAGE: dict[str, Any] = {
    "name": "mine",
    "modality": "image",
    "pipeline": "FluxPipeline",
    "source": "x",
    "defaults": {"width": 64, "height": 64},
    "limits": {"max_width": 64, "max_height": 64},
}
VIDEO: dict[str, Any] = {
    **IMAGE,
    "modality": "video",
    "pipeline": "WanPipeline",
    "defaults": {"width": 64, "height": 64, "num_frames": 5},
    "limits": {"max_width": 64, "max_height": 64, "max_num_frames": 9},
}
AUDIO: dict[str, Any] = {
    **IMAGE,
    "modality": "audio",
    "pipeline": "StableAudioPipeline",
    "defaults": {"duration_s": 1.0},
    "limits": {"max_duration_s": 2.0},
}


def refusal(entry: dict[str, Any], **changes: Any) -> str:
    """The one-line refusal of `entry` with `changes`, naming model 'mine' and a field."""
    with pytest.raises(RegistryError) as caught:
        parse_registry({"models": [{**entry, **changes}]}, "models.yaml")
    message = str(caught.value)
    assert message.startswith("models.yaml: model 'mine' field ") and "\n" not in message
    return message


def accepted(entry: dict[str, Any], **changes: Any) -> ModelSpec:
    """`entry` with `changes`, as the registry loads it."""
    return parse_registry({"models": [{**entry, **changes}]}).models[0]
