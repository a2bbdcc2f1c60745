"""Accepted request fields come from the pipeline class's call signature, without torch."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from mediamesh.common.pipeline_fields import call_parameters, signature_fields, unknown_call_kwargs
from mediamesh.common.registry import RegistryError, load_registry, parse_registry


def image_entry(pipeline: str, **fields: object) -> dict[str, Any]:
    """A registry entry of an image model served by `pipeline`, with `fields` set."""
    return {
        "name": "mine",
        "modality": "image",
        "pipeline": pipeline,
        "source": "nowhere",
        "defaults": {"width": 64, "height": 64},
        "limits": {"max_width": 64, "max_height": 64},
        **fields,
    }


def test_fields_follow_each_pipelines_signature() -> None:
    assert signature_fields("StableDiffusionXLPipeline") == {
        "prompt",
        "negative_prompt",
        "steps",
        "seed",
        "guidance_scale",
        "width",
        "height",
    }
    assert "num_frames" in (signature_fields("CogVideoXPipeline") or set())
    # Audio length is `audio_length_in_s` in AudioLDM2 and `audio_end_in_s` in Stable Audio.
    assert "duration_s" in (signature_fields("AudioLDM2Pipeline") or set())
    assert "duration_s" in (signature_fields("StableAudioPipeline") or set())
    # Flux's call takes negative_prompt, but it only acts with true CFG, which is withheld.
    assert "negative_prompt" in (call_parameters("FluxPipeline") or set())
    assert "negative_prompt" not in (signature_fields("FluxPipeline") or set())
    assert signature_fields("NoSuchPipeline") is None


def test_registry_entries_take_the_signature_fields() -> None:
    registry = load_registry()
    for name in ("sdxl-tiny", "sd3-tiny", "pixart-tiny"):
        spec = registry.get(name)
        assert spec is not None and "negative_prompt" in spec.accepted_fields
    cog = registry.get("cogvideox-tiny")
    assert cog is not None and {"num_frames", "negative_prompt"} <= cog.accepted_fields


def test_reading_fields_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "from mediamesh.common.registry import load_registry\n"
        "load_registry()\n"
        "assert 'torch' not in sys.modules and 'diffusers' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_call_kwargs_cannot_set_what_requests_or_the_worker_control() -> None:
    entry = image_entry("StableDiffusionXLPipeline", call_kwargs={"generator": 1, "eta": 0.5})
    with pytest.raises(RegistryError, match="call_kwargs: generator"):
        parse_registry({"models": [entry]})
    entry["call_kwargs"] = {"eta": 0.5}
    assert parse_registry({"models": [entry]}).models[0].call_kwargs == {"eta": 0.5}


def test_a_misspelt_call_kwarg_is_refused_where_the_call_only_reads_named_keywords() -> None:
    # Stable Diffusion's calls take **kwargs only to pop their deprecated callbacks: any
    # other keyword was dropped unread, so a typo changed nothing without a word.
    entry = image_entry("StableDiffusionPipeline", call_kwargs={"guidance_rescal": 0.7})
    with pytest.raises(RegistryError, match="guidance_rescal"):
        parse_registry({"models": [entry]})
    entry["call_kwargs"] = {"guidance_rescale": 0.7}
    assert parse_registry({"models": [entry]}).models[0].call_kwargs == {"guidance_rescale": 0.7}
    # A call that passes its **kwargs on takes any keyword (PixArt's).
    assert unknown_call_kwargs("PixArtAlphaPipeline", ["anything"]) == []


def test_a_pipeline_whose_output_is_not_the_modalitys_is_refused() -> None:
    # LDM3D returns rgb and depth, not images: every job failed INTERNAL on a ready model.
    entry = image_entry("StableDiffusionLDM3DPipeline")
    with pytest.raises(RegistryError, match=r"returns depth, nsfw_content_detected, rgb, not"):
        parse_registry({"models": [entry]})


def test_an_auto_pipeline_is_refused_naming_the_class_to_write() -> None:
    entry = image_entry("AutoPipelineForImage2Image")
    with pytest.raises(RegistryError, match=r"pipeline: AutoPipelineForImage2Image picks a"):
        parse_registry({"models": [entry]})
