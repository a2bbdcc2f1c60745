"""A pipeline that `from_pretrained` returned is checked against its class and its folder
before it is placed on a device.

diffusers loads what it can and warns about the rest: a component the class takes but the
folder does not hold is left None (an SD1.5 folder loaded as SDXL has no `tokenizer_2`), a
component of another class than the pipeline's `__init__` expects is kept (a 2-D UNet in a
text-to-video pipeline), and tensors a checkpoint lacks stay on the meta device. Each would
load "ready" and then fail every job, or fail placement with a traceback naming no entry;
here each stops the load with one line naming the entry, its source and what to do.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch

from mediamesh.common.registry import ModelSpec
from mediamesh.worker.models.memory import ModelLoadError

# Enough tensor names to recognise the component's layout without flooding the line.
NAMED_TENSORS = 3


def check_loaded_pipeline(
    spec: ModelSpec, pipeline: Any, *, source: str, local_dir: Path, passed: Collection[str]
) -> None:
    """ModelLoadError when a component the class needs is missing or of another class;
    components in `passed` were handed to `from_pretrained`, not loaded from the folder, and
    are not checked."""
    prefix = f"model {spec.name!r} (source {source}): cannot be loaded as {spec.pipeline}"
    hint = loading_hint(spec, local_dir)
    absent = absent_component_folders(local_dir, passed)
    if absent:
        # transformers loads a tokenizer from a folder that is not there as an empty one,
        # without a word: the model then loads, reads ready, and fails every job.
        raise ModelLoadError(
            f"{prefix}: its model_index.json lists {', '.join(absent)}, but the folder has no "
            f"such subfolder (a partial copy?); {hint}"
        )
    missing = missing_components(pipeline, listed_components(local_dir), passed)
    if missing:
        raise ModelLoadError(
            f"{prefix}: the folder has no {', '.join(missing)} (absent from its "
            f"model_index.json), which {spec.pipeline} needs; {hint}"
        )
    mistyped = mistyped_components(pipeline, passed)
    if mistyped:
        mismatches = ", ".join(
            f"its {name} is a {found} where {spec.pipeline} expects {' or '.join(expected)}"
            for name, found, expected in mistyped
        )
        raise ModelLoadError(f"{prefix}: {mismatches}; {hint}")


def check_no_meta_tensors(
    spec: ModelSpec, pipeline: Any, *, source: str, passed: Collection[str]
) -> None:
    """ModelLoadError naming the first component whose checkpoint lacked tensors: diffusers
    says "newly initialized" but leaves them on the meta device, with no data to place."""
    for name, component in pipeline.components.items():
        if name in passed or not isinstance(component, torch.nn.Module):
            continue
        unset = [
            tensor_name
            for tensor_name, tensor in (*component.named_parameters(), *component.named_buffers())
            if tensor.is_meta
        ]
        if unset:
            shown = ", ".join(unset[:NAMED_TENSORS]) + (", …" if len(unset) > NAMED_TENSORS else "")
            raise ModelLoadError(
                f"model {spec.name!r} (source {source}): cannot be loaded as {spec.pipeline}: "
                f"its {name} is missing {len(unset)} tensors from its weight files ({shown}); "
                "the checkpoint is incomplete or saved for another configuration of "
                f"{type(component).__name__}: copy or pull the model again, or point `source` "
                "at a complete one"
            )


def listed_components(local_dir: Path) -> set[str] | None:
    """The component names the folder's model_index.json lists, null ones included; None
    when it cannot be read (the load itself would have failed on it)."""
    try:
        index = json.loads((local_dir / "model_index.json").read_text())
    except (OSError, ValueError):
        return None
    return {key for key in index if not key.startswith("_")} if isinstance(index, dict) else None


def absent_component_folders(local_dir: Path, passed: Collection[str]) -> list[str]:
    """Components the folder's model_index.json lists with a class (not null) whose
    subfolder is missing, leaving out those in `passed`."""
    try:
        index = json.loads((local_dir / "model_index.json").read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(index, dict):
        return []
    return [
        name
        for name, value in index.items()
        if not name.startswith("_")
        and name not in passed
        and isinstance(value, list)
        and any(part is not None for part in value)
        and not (local_dir / name).is_dir()
    ]


def missing_components(
    pipeline: Any, listed: set[str] | None, passed: Collection[str]
) -> list[str]:
    """Components `__init__` needs (no default) that the folder does not list and that are
    None. One listed as null was left out on purpose (an SDXL refiner's `text_encoder`); one
    with a default None is extra (`image_encoder` for IP-Adapters), absent from older folders
    without harm."""
    if listed is None:
        return []
    parameters = inspect.signature(type(pipeline).__init__).parameters.values()
    needed = [
        p.name
        for p in parameters
        if p.name != "self"
        and p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    return [
        name
        for name in needed
        if name not in listed and name not in passed and getattr(pipeline, name, None) is None
    ]


def mistyped_components(pipeline: Any, passed: Collection[str]) -> list[tuple[str, str, list[str]]]:
    """(name, found class, expected classes) of each loaded model whose class is not one
    its `__init__` annotation names. Models only: tokenizers, processors and schedulers are
    swapped freely (annotations name the slow tokenizer, or a scheduler enum), as diffusers'
    own check skips them."""
    signature_types = getattr(type(pipeline), "_get_signature_types", None)
    if signature_types is None:
        return []
    expected_types: dict[str, tuple[object, ...]] = signature_types()
    wrong: list[tuple[str, str, list[str]]] = []
    for name, component in pipeline.components.items():
        if name in passed or not isinstance(component, torch.nn.Module):
            continue
        expected = expected_types.get(name, ())
        # An annotation that is not plain classes (a generic, Any, none at all) is not judged.
        if not expected or not all(isinstance(t, type) for t in expected):
            continue
        classes = tuple(t for t in expected if isinstance(t, type))
        if not isinstance(component, classes):
            wrong.append((name, type(component).__name__, [t.__name__ for t in classes]))
    return wrong


def loading_hint(spec: ModelSpec, local_dir: Path) -> str:
    """What to do about a folder that does not load as the entry's pipeline class."""
    index = local_dir / "model_index.json"
    try:
        saved_as = json.loads(index.read_text()).get("_class_name")
    except (OSError, ValueError, AttributeError):
        saved_as = None
    if isinstance(saved_as, str) and saved_as != spec.pipeline:
        return (
            f"the folder was saved as {saved_as}: check that `pipeline` names a class that "
            "can load it"
        )
    return "check that `pipeline` names the folder's pipeline class and that its files are complete"
