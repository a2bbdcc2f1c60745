"""A negative prompt that classifier-free guidance would never read is refused."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.params import RequestFields, check_generation, resolve
from mediamesh.common.pipeline_fields import _diffusers_root
from mediamesh.common.registry import (
    NEGATIVE_PROMPT_NEEDS_CFG,
    ModelSpec,
    load_registry,
    parse_registry,
)

REGISTRY = load_registry()
# The shipped text-to-X entries of every family whose negative prompt needs CFG.
CFG_MODELS = (
    "sdxl-tiny",
    "sd3-tiny",
    "pixart-tiny",
    "wan-tiny",
    "cogvideox-tiny",
    "stable-audio-tiny",
    "audioldm2-tiny",
)


def spec(name: str) -> ModelSpec:
    found = REGISTRY.get(name)
    assert found is not None
    return found


def refusal(model: ModelSpec, **fields: object) -> str:
    with pytest.raises(InvalidArgument) as caught:
        resolve(model, RequestFields(model.name, "a fox", **fields))  # type: ignore[arg-type]
    return caught.value.message


@pytest.mark.parametrize("name", CFG_MODELS)
def test_a_negative_prompt_without_guidance_is_refused(name: str) -> None:
    model = spec(name)
    assert model.negative_prompt_needs_cfg
    for guidance in (1.0, 0.5, 0.0):
        shown = f"{guidance:g}"
        assert refusal(model, negative_prompt="blur", guidance_scale=guidance) == (
            "negative_prompt: takes effect only with guidance_scale above 1 (classifier-free "
            f"guidance); this request's guidance_scale is {shown}; set guidance_scale above 1 "
            "or leave negative_prompt unset"
        )
    # With guidance on, or without a negative prompt, the request stands.
    assert resolve(model, RequestFields(name, "a fox", negative_prompt="blur")).negative_prompt
    just_above = RequestFields(name, "a fox", negative_prompt="blur", guidance_scale=1.01)
    assert resolve(model, just_above).guidance_scale == 1.01
    assert resolve(model, RequestFields(name, "a fox", guidance_scale=1.0)).guidance_scale == 1.0


def test_image_input_siblings_follow_their_family() -> None:
    for name in ("sdxl-img2img-tiny", "sdxl-inpaint-tiny", "cogvideox-i2v-tiny"):
        assert spec(name).negative_prompt_needs_cfg, name


def test_a_model_default_of_1_counts_as_the_guidance() -> None:
    entry = spec("sdxl-tiny").model_dump(mode="json", exclude={"accepted_fields"})
    entry["defaults"] = {**entry["defaults"], "guidance_scale": 1.0}
    model = parse_registry({"models": [entry]}).models[0]
    assert refusal(model, negative_prompt="blur").endswith(
        "this request's guidance_scale is 1 (the model's default); set guidance_scale above 1 "
        "or leave negative_prompt unset"
    )
    assert resolve(model, RequestFields("sdxl-tiny", "x", negative_prompt="b", guidance_scale=2))


def test_a_worker_refuses_such_a_job_too() -> None:
    params = resolve(spec("wan-tiny"), RequestFields("wan-tiny", "a fox", guidance_scale=1.0))
    with pytest.raises(InvalidArgument, match=r"^negative_prompt: takes effect only"):
        check_generation(spec("wan-tiny"), replace(params, negative_prompt="blur"))


def test_flux_still_refuses_a_negative_prompt_by_its_own_rule() -> None:
    flux = spec("flux-tiny")
    assert not flux.negative_prompt_needs_cfg
    assert refusal(flux, negative_prompt="blur", guidance_scale=3.5).startswith(
        "negative_prompt: model 'flux-tiny' (FluxPipeline) does not use it"
    )


_CFG_FLAG = re.compile(
    r"do_classifier_free_guidance = guidance_scale > (\S+)"
    r"|def do_classifier_free_guidance\(self\):\s+return self\._guidance_scale > (\S+)"
)


def test_the_table_matches_each_pipelines_cfg_condition_in_diffusers() -> None:
    root = _diffusers_root()
    # A project dependency: without it the table could not be checked, and must not pass.
    assert root is not None, "diffusers is not installed"
    for pipeline in sorted(NEGATIVE_PROMPT_NEEDS_CFG):
        path = next(
            (
                p
                for p in (root / "pipelines").rglob("pipeline_*.py")
                if f"class {pipeline}(" in p.read_text(encoding="utf-8")
            ),
            None,
        )
        assert path is not None, pipeline
        source = path.read_text(encoding="utf-8")
        floors = {a or b for a, b in _CFG_FLAG.findall(source)}
        # `> 1` exactly (SD 1.x and SDXL add "and the UNet is not guidance-distilled").
        assert floors and floors <= {"1", "1.0"}, (pipeline, floors)
        # The negative prompt is encoded only under that flag.
        assert re.search(r"if do_classifier_free_guidance and negative_prompt", source), pipeline
