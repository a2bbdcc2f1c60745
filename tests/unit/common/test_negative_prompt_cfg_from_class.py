"""Whether a negative prompt needs classifier-free guidance is read from the pipeline class
itself, so that any diffusers pipeline that gates CFG on guidance_scale refuses a negative
prompt it would drop, not only the families of a table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mediamesh.common import pipeline_fields
from mediamesh.common.errors import InvalidArgument
from mediamesh.common.params import RequestFields, resolve
from mediamesh.common.pipeline_fields import cfg_guidance_floor
from mediamesh.common.registry import (
    CFG_GUIDANCE_FLOOR,
    NEGATIVE_PROMPT_NEEDS_CFG,
    ModelSpec,
    negative_prompt_cfg_floor,
    parse_registry,
)
from tests.unit.common.registry_entries import AUDIO, IMAGE, VIDEO

# Pipelines outside the old table whose `do_classifier_free_guidance` is guidance_scale > 1:
# as a flag their call sets, as a property, or a property with a distilled-UNet condition.
GATED = (
    ("TextToVideoSDPipeline", VIDEO),
    ("AnimateDiffPipeline", VIDEO),
    ("StableDiffusionPAGPipeline", IMAGE),
    ("LTXPipeline", VIDEO),
    ("AudioLDMPipeline", AUDIO),
    ("MusicLDMPipeline", AUDIO),
)


def model(pipeline: str, entry: dict[str, Any], **changes: Any) -> ModelSpec:
    return parse_registry({"models": [{**entry, "pipeline": pipeline, **changes}]}).models[0]


def asked(spec: ModelSpec, negative: str, guidance: float) -> RequestFields:
    return RequestFields(spec.name, "a fox", negative_prompt=negative, guidance_scale=guidance)


@pytest.mark.parametrize(("pipeline", "entry"), GATED, ids=[p for p, _ in GATED])
def test_a_gated_pipeline_refuses_a_negative_prompt_at_guidance_1(
    pipeline: str, entry: dict[str, Any]
) -> None:
    spec = model(pipeline, entry)
    assert cfg_guidance_floor(pipeline) == 1.0
    for negative in ("blurry", "a dog"):
        with pytest.raises(InvalidArgument, match=r"^negative_prompt: takes effect only with "):
            resolve(spec, asked(spec, negative, 1.0))
    assert resolve(spec, asked(spec, "blurry", 1.5)).negative_prompt == "blurry"
    assert resolve(spec, asked(spec, "", 1.0)).guidance_scale == 1.0


@pytest.mark.parametrize(
    ("pipeline", "call_kwargs"),
    [
        # Flux and Qwen-Image read the negative prompt under true_cfg_scale > 1, whatever
        # the guidance (an embedding on Flux).
        ("FluxPipeline", {"true_cfg_scale": 4.0}),
        ("QwenImagePipeline", {}),
        # Kandinsky 5 gates its negative prompt inline, not through the flag: not refused.
        ("Kandinsky5T2IPipeline", {}),
    ],
)
def test_pipelines_without_that_gate_keep_the_negative_prompt(
    pipeline: str, call_kwargs: dict[str, Any]
) -> None:
    spec = model(pipeline, IMAGE, call_kwargs=call_kwargs)
    assert "negative_prompt" in spec.accepted_fields
    assert not spec.negative_prompt_needs_cfg
    assert resolve(spec, asked(spec, "blurry", 1.0)).negative_prompt == "blurry"


def test_the_floor_is_the_class_own() -> None:
    # Z-Image runs CFG at any guidance_scale above 0.
    spec = model("ZImagePipeline", IMAGE)
    with pytest.raises(InvalidArgument) as caught:
        resolve(spec, asked(spec, "blurry", 0.0))
    assert caught.value.message.startswith(
        "negative_prompt: takes effect only with guidance_scale above 0 (classifier-free "
        "guidance); this request's guidance_scale is 0;"
    )
    assert resolve(spec, asked(spec, "blurry", 0.5)).negative_prompt == "blurry"


FAKE_PIPELINES = """
class FlagPipeline(DiffusionPipeline):
    @property
    def do_classifier_free_guidance(self):
        return True

    def __call__(self, prompt, negative_prompt=None, guidance_scale=5.0):
        do_classifier_free_guidance = guidance_scale > 2


class EitherPipeline(DiffusionPipeline):
    @property
    def do_classifier_free_guidance(self):
        return (self._guidance_scale > 1.0) or (self._audio_guidance_scale > 1.0)

    def __call__(self, prompt, negative_prompt=None, guidance_scale=5.0):
        pass


class UnlessDistilledPipeline(DiffusionPipeline):
    @property
    def do_classifier_free_guidance(self):
        return self._guidance_scale > 1 and self.unet.config.time_cond_proj_dim is None

    def __call__(self, prompt, negative_prompt=None, guidance_scale=5.0):
        pass
"""


def test_which_conditions_count_as_a_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "pipeline_fake.py").write_text(FAKE_PIPELINES, encoding="utf-8")
    monkeypatch.setattr(pipeline_fields, "_diffusers_root", lambda: tmp_path)
    pipeline_fields._pipeline_class.cache_clear()
    try:
        # The call's own flag shadows the property.
        assert cfg_guidance_floor("FlagPipeline") == 2.0
        # CFG that another scale can turn on is no guidance_scale gate.
        assert cfg_guidance_floor("EitherPipeline") is None
        assert cfg_guidance_floor("UnlessDistilledPipeline") == 1.0
        assert cfg_guidance_floor("MissingPipeline") is None
    finally:
        pipeline_fields._pipeline_class.cache_clear()


def test_the_fallback_table_agrees_with_the_classes() -> None:
    for pipeline in sorted(NEGATIVE_PROMPT_NEEDS_CFG):
        assert cfg_guidance_floor(pipeline) == CFG_GUIDANCE_FLOOR, pipeline


def test_without_diffusers_the_table_stands_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline_fields, "_diffusers_root", lambda: None)
    caches = (pipeline_fields._pipeline_class, pipeline_fields._call_signature)
    for cache in caches:
        cache.cache_clear()
    try:
        assert negative_prompt_cfg_floor("StableDiffusionPipeline") == CFG_GUIDANCE_FLOOR
        assert negative_prompt_cfg_floor("TextToVideoSDPipeline") is None
    finally:
        for cache in caches:
            cache.cache_clear()
