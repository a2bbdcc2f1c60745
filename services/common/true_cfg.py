"""Request fields a pipeline takes only when a registry entry switches on what they need.

Flux is guidance-distilled: its `guidance_scale` is an embedding, not classifier-free
guidance, and its `negative_prompt` acts only with `true_cfg_scale` > 1 (true CFG, a second
transformer pass per step, twice the cost). So a Flux entry refuses `negative_prompt`
unless its `call_kwargs` set `true_cfg_scale` above 1; then the request's negative prompt
is passed through and the pipeline runs true CFG for the jobs that have one. This table is
the declarative hook; the worker needs nothing more, since it passes every accepted field
the call takes and adds the entry's `call_kwargs` to each call.
"""

from __future__ import annotations

from collections.abc import Mapping

# Pipeline -> {withheld request field: the call argument that must exceed 1 to release it}.
RELEASED_BY: dict[str, dict[str, str]] = {
    "FluxPipeline": {"negative_prompt": "true_cfg_scale"},
    "FluxImg2ImgPipeline": {"negative_prompt": "true_cfg_scale"},
}


def released_fields(pipeline: str, call_kwargs: Mapping[str, object] | None) -> frozenset[str]:
    """The withheld fields of `pipeline` that the entry's `call_kwargs` switch on."""
    fixed = call_kwargs or {}
    released = set()
    for field, argument in RELEASED_BY.get(pipeline, {}).items():
        value = fixed.get(argument)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 1:
            released.add(field)
    return frozenset(released)
