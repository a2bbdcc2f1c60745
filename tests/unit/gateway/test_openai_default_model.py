"""The default model of an OpenAI route is one that can serve the request as sent: it takes
the inputs sent and needs none the request lacks (an edit without a mask does not default to
an inpainting model, which would only refuse it for the missing mask)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from mediamesh.gateway.http.openai_common import pick_model

GENERATE = {"name": "flux-tiny", "modality": "image", "inputs": [], "ready": True}
INPAINT = {
    "name": "sdxl-inpaint-tiny",
    "modality": "image",
    "inputs": ["image", "mask_image"],
    "ready": True,
}
IMG2IMG = {"name": "flux-img2img-tiny", "modality": "image", "inputs": ["image"], "ready": True}


def picked(models: list[dict[str, Any]], inputs: dict[str, str], allowed: list[str]) -> str:
    async def recent_models() -> list[dict[str, Any]]:
        return models

    plane = SimpleNamespace(recent_models=recent_models)
    caller = SimpleNamespace(tenant="t", quota=SimpleNamespace(allowed_models=allowed))
    chosen = asyncio.run(pick_model(cast(Any, plane), cast(Any, caller), None, "image", inputs))
    return str(chosen["name"])


def test_an_edit_without_a_mask_defaults_to_a_model_that_needs_none() -> None:
    models = [GENERATE, INPAINT, IMG2IMG]
    allowed = ["flux-tiny", "flux-img2img-tiny", "sdxl-inpaint-tiny"]
    assert picked(models, {"image": "image"}, allowed) == "flux-img2img-tiny"
    assert picked(models, {"image": "image"}, []) == "flux-img2img-tiny"
    # Ready or not, a model that could serve the edit comes before one that must refuse it.
    waking = [GENERATE, INPAINT, {**IMG2IMG, "ready": False}]
    assert picked(waking, {"image": "image"}, []) == "flux-img2img-tiny"


def test_an_edit_with_a_mask_defaults_to_an_inpainting_model() -> None:
    models = [GENERATE, IMG2IMG, INPAINT]
    both = {"image": "image", "mask_image": "mask"}
    assert picked(models, both, []) == "sdxl-inpaint-tiny"


def test_a_generation_defaults_to_a_model_that_needs_no_input() -> None:
    assert picked([IMG2IMG, GENERATE], {}, []) == "flux-tiny"


def test_with_only_models_needing_more_the_first_is_chosen_to_name_what_is_missing() -> None:
    # Its refusal ("mask: required by model ...") says what to send.
    assert picked([GENERATE, INPAINT], {"image": "image"}, []) == "sdxl-inpaint-tiny"
