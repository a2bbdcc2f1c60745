"""Flux's negative prompt is accepted only where the entry switches on true CFG."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.params import RequestFields, resolve
from mediamesh.common.registry import ModelSpec, RegistryError, load_registry, parse_registry


def flux_entry(**call_kwargs: object) -> ModelSpec:
    spec = load_registry().get("flux-tiny")
    assert spec is not None
    entry = spec.model_dump(mode="json", exclude={"accepted_fields"})
    entry["call_kwargs"] = call_kwargs
    return parse_registry({"models": [entry]}).models[0]


def test_true_cfg_scale_above_one_releases_the_negative_prompt() -> None:
    spec = flux_entry(true_cfg_scale=4.0)
    assert "negative_prompt" in spec.accepted_fields
    params = resolve(spec, RequestFields("flux-tiny", "a fox", negative_prompt="blurry"))
    assert params.negative_prompt == "blurry"


@pytest.mark.parametrize("call_kwargs", [{}, {"true_cfg_scale": 1.0}, {"true_cfg_scale": True}])
def test_without_true_cfg_the_negative_prompt_is_refused(call_kwargs: dict[str, object]) -> None:
    spec = flux_entry(**call_kwargs)
    assert "negative_prompt" not in spec.accepted_fields
    with pytest.raises(InvalidArgument, match=r"^negative_prompt: model 'flux-tiny'"):
        resolve(spec, RequestFields("flux-tiny", "a fox", negative_prompt="blurry"))


def test_other_families_refuse_the_switch_their_call_would_drop() -> None:
    # SDXL's call takes **kwargs only for its deprecated callbacks: true_cfg_scale would be
    # dropped unread, so the entry is refused rather than left to mislead.
    spec = load_registry().get("sdxl-tiny")
    assert spec is not None
    entry = spec.model_dump(mode="json", exclude={"accepted_fields"})
    entry["call_kwargs"] = {"true_cfg_scale": 4.0}
    with pytest.raises(RegistryError, match="has no parameter true_cfg_scale"):
        parse_registry({"models": [entry]})
