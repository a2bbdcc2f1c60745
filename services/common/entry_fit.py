"""A registry entry that its pipeline cannot serve as written is refused when it loads.

Each check here is a mistake that would otherwise start a mesh that looks ready and then
fails or quietly misleads every job: a modality the pipeline does not make, a fixed call
argument the pipeline has no parameter for, a request field listed as accepted that would
never reach the call, default or largest sizes off the entry's own size multiple,
settings for input images on a model that takes none, and a parallelism mode the built-in
Echo would ignore.
"""

from __future__ import annotations

from typing import Any

from mediamesh.common.pipeline_fields import modality_mismatch, unknown_call_kwargs


def check_entry_fits(spec: Any, family: frozenset[str] | None) -> None:
    """ValueError naming the field of `spec` (a ModelSpec) its pipeline cannot honour;
    `family` is the request fields the pipeline's call takes (None: unknown, unchecked)."""
    mismatch = modality_mismatch(spec.pipeline, spec.modality)
    if mismatch:
        raise ValueError(f"modality: {spec.modality}, but {mismatch}")
    unknown = unknown_call_kwargs(spec.pipeline, spec.call_kwargs)
    if unknown:
        raise ValueError(
            f"call_kwargs: {spec.pipeline}'s call has no parameter {', '.join(unknown)}"
        )
    unreached = sorted(spec.accepted_fields - family) if family is not None else []
    if unreached:
        raise ValueError(
            f"accepted_fields: {', '.join(unreached)} would never reach {spec.pipeline}'s "
            f"call, so a request setting it would be silently ignored; it takes "
            f"{', '.join(sorted(family or ()))}"
        )
    _check_size_multiples(spec)
    _check_image_settings(spec)
    _check_echo_parallelism(spec)


def _check_size_multiples(spec: Any) -> None:
    multiple = spec.limits.size_multiple
    if spec.modality == "audio" or multiple < 1:
        return
    for field, size in (
        ("defaults.width", spec.defaults.width),
        ("defaults.height", spec.defaults.height),
        ("limits.max_width", spec.limits.max_width),
        ("limits.max_height", spec.limits.max_height),
    ):
        if size % multiple:
            below = size // multiple * multiple
            raise ValueError(
                f"{field}={size} is not a multiple of limits.size_multiple ({multiple}), "
                f"so requests would be refused at it; use {below or multiple} or "
                f"{below + multiple}"
            )


def _check_image_settings(spec: Any) -> None:
    """Settings for input images on an entry that takes none would never apply. Compared
    with the defaults, as a dumped entry carries them whatever the YAML said."""
    if spec.inputs:
        return
    unset_defaults, unset_limits = type(spec.defaults)(), type(spec.limits)()
    for field, value, unset in (
        ("defaults.strength", spec.defaults.strength, unset_defaults.strength),
        ("limits.max_input_pixels", spec.limits.max_input_pixels, unset_limits.max_input_pixels),
    ):
        if value != unset:
            raise ValueError(
                f"{field}: {spec.pipeline} takes no input image, so it would never apply; "
                "leave it unset"
            )


def _check_echo_parallelism(spec: Any) -> None:
    """The built-in Echo is hosted on the worker's device whatever its mode: a parallel
    mode would be listed by ListModels but never run."""
    mode = spec.parallelism.mode
    if spec.pipeline == "Echo" and mode != "data":
        raise ValueError(
            f"parallelism.mode: the builtin Echo model runs no torch and has nothing to "
            f"spread over devices, so {mode} mode would be ignored; use data mode "
            "(leave parallelism unset)"
        )
