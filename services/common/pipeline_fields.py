"""Which request fields a diffusers pipeline class takes, read from its `__call__` signature.

The gateway and the scheduler validate requests against the registry but never load torch,
so this reads the installed diffusers source with `ast` instead of importing the class. The
worker maps the same fields onto the same signature (`worker.models.call_args`), so what
the gateway accepts is exactly what the pipeline call can take.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

# Request field -> the pipeline call parameters that carry it (any one is enough).
FIELD_PARAMETERS: dict[str, tuple[str, ...]] = {
    "prompt": ("prompt",),
    "negative_prompt": ("negative_prompt",),
    "steps": ("num_inference_steps",),
    "seed": ("generator",),
    "guidance_scale": ("guidance_scale",),
    "width": ("width",),
    "height": ("height",),
    "num_frames": ("num_frames",),
    "duration_s": ("audio_end_in_s", "audio_length_in_s"),
    "strength": ("strength",),
}

# Pipelines whose call takes a parameter but where mediamesh does not route the request
# field to it. Flux's `negative_prompt` only acts with `true_cfg_scale` > 1, which doubles
# the cost of every step; a guidance-distilled model refuses it rather than ignore it.
WITHHELD_FIELDS: dict[str, frozenset[str]] = {
    "FluxPipeline": frozenset({"negative_prompt"}),
    "FluxImg2ImgPipeline": frozenset({"negative_prompt"}),
}


def call_parameters(pipeline: str) -> frozenset[str] | None:
    """The parameter names of `pipeline.__call__` in the installed diffusers, or None when
    the class or its source cannot be found (the caller then falls back to a table)."""
    return _call_parameters(pipeline)


def signature_fields(pipeline: str) -> frozenset[str] | None:
    """Request fields the pipeline's call takes, or None when its signature is unknown."""
    parameters = call_parameters(pipeline)
    if parameters is None:
        return None
    fields = {
        field
        for field, names in FIELD_PARAMETERS.items()
        if any(name in parameters for name in names)
    }
    return frozenset(fields) - WITHHELD_FIELDS.get(pipeline, frozenset())


@functools.cache
def _call_parameters(pipeline: str) -> frozenset[str] | None:
    if not pipeline.isidentifier():
        return None
    root = _diffusers_root()
    if root is None:
        return None
    needle = f"class {pipeline}("
    for path in sorted((root / "pipelines").rglob("pipeline_*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        if needle in text:
            return _parameters_in(text, pipeline)
    return None


def _diffusers_root() -> Path | None:
    # find_spec locates the package without executing it (and so without torch).
    spec = importlib.util.find_spec("diffusers")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _parameters_in(source: str, pipeline: str) -> frozenset[str] | None:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == pipeline:
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and (
                    item.name == "__call__"
                ):
                    arguments = item.args
                    names = [a.arg for a in arguments.posonlyargs + arguments.args]
                    names += [a.arg for a in arguments.kwonlyargs]
                    return frozenset(names) - {"self"}
    return None
