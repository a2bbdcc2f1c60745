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
from collections.abc import Iterable
from dataclasses import dataclass
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


_DURATION_PARAMETERS = FIELD_PARAMETERS["duration_s"]


@dataclass(frozen=True)
class _Signature:
    names: frozenset[str]
    # `**kwargs` in the call: any keyword is taken (and may be dropped unread).
    open_keywords: bool


def call_parameters(pipeline: str) -> frozenset[str] | None:
    """The parameter names of `pipeline.__call__` in the installed diffusers, or None when
    the class or its source cannot be found (the caller then falls back to a table)."""
    signature = _call_signature(pipeline)
    return None if signature is None else signature.names


def unknown_call_kwargs(pipeline: str, names: Iterable[str]) -> list[str]:
    """Those of `names` the pipeline's call has no parameter for (none when its signature
    is unknown or it takes any keyword)."""
    signature = _call_signature(pipeline)
    if signature is None or signature.open_keywords:
        return []
    return sorted(set(names) - signature.names)


# What the mesh reads from a pipeline call's output, by modality: the first it has.
OUTPUT_ATTRIBUTE: dict[str, tuple[str, ...]] = {
    "image": ("images", "image"),
    "video": ("frames",),
    "audio": ("audios",),
}


def output_fields(pipeline: str) -> frozenset[str] | None:
    """The fields the pipeline's call returns its output in, read from the `...Output(...)`
    it returns; None when unknown (no such return, or one that passes them by position)."""
    found = _pipeline_class(pipeline)
    call = _method(found, "__call__") if found is not None else None
    if call is None:
        return None
    fields: set[str] = set()
    for node in ast.walk(call):
        if not isinstance(node, ast.Return) or not isinstance(node.value, ast.Call):
            continue
        made = node.value.func
        name = made.id if isinstance(made, ast.Name) else getattr(made, "attr", "")
        if not name.endswith("Output"):
            continue
        if node.value.args or any(k.arg is None for k in node.value.keywords):
            return None
        fields.update(k.arg for k in node.value.keywords if k.arg)
    return frozenset(fields) or None


def modality_mismatch(pipeline: str, modality: str) -> str | None:
    """Why an entry of `modality` cannot run `pipeline`, read from the call's parameters
    (the length of a clip, the duration of audio), or None when it can or the signature is
    unknown."""
    parameters = call_parameters(pipeline)
    if parameters is None:
        return None
    frames = "num_frames" in parameters
    duration = bool(parameters & set(_DURATION_PARAMETERS))
    durations = " or ".join(_DURATION_PARAMETERS)
    if modality == "video" and not frames:
        return f"{pipeline}'s call takes no num_frames, so a video's length cannot be set"
    if modality == "audio" and not duration:
        return f"{pipeline}'s call takes no {durations}, so it makes no audio the mesh can time"
    if modality == "image" and (frames or duration):
        made = "video" if frames else "audio"
        return f"{pipeline} makes {made} (its call takes {'num_frames' if frames else durations})"
    returned = output_fields(pipeline)
    wanted = OUTPUT_ATTRIBUTE.get(modality, ())
    if returned is not None and wanted and not returned & set(wanted):
        return (
            f"{pipeline}'s call returns {', '.join(sorted(returned))}, not the "
            f"{' or '.join(wanted)} the mesh serves for {modality} models"
        )
    return None


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


_CFG_FLAG = "do_classifier_free_guidance"
# The call's argument, and the copy the property reads (`self._guidance_scale`).
_GUIDANCE_NAMES = frozenset({"guidance_scale", "_guidance_scale"})


@functools.cache  # read per request (params.check_negative_prompt); the class never changes
def cfg_guidance_floor(pipeline: str) -> float | None:
    """The guidance_scale that `pipeline` runs classifier-free guidance above, read from
    its class in the installed diffusers: the `do_classifier_free_guidance` flag its
    `__call__` sets, else its property of that name, when it is `guidance_scale > N`
    (alone, or with `and` conditions such as "the UNet is not guidance-distilled"). None
    when the class gates CFG on anything else (Flux's `true_cfg_scale`), always or never
    runs it, or cannot be found."""
    found = _pipeline_class(pipeline)
    if found is None:
        return None
    call = _method(found, "__call__")
    flags = [
        node.value
        for node in (ast.walk(call) if call is not None else ())
        if isinstance(node, ast.Assign)
        and [_name_of(target) for target in node.targets] == [_CFG_FLAG]
    ]
    # The call's own flag shadows the property; a call that sets it twice is no one gate.
    if flags:
        return _guidance_floor(flags[0]) if len(flags) == 1 else None
    prop = _method(found, _CFG_FLAG)
    returns = [node for node in ast.walk(prop) if isinstance(node, ast.Return)] if prop else []
    if len(returns) != 1 or returns[0].value is None:
        return None
    return _guidance_floor(returns[0].value)


def _guidance_floor(condition: ast.expr) -> float | None:
    if isinstance(condition, ast.BoolOp) and isinstance(condition.op, ast.And):
        # Each added condition only turns CFG off more often; one guidance bound is needed.
        floors = [f for f in map(_guidance_floor, condition.values) if f is not None]
        return floors[0] if len(floors) == 1 else None
    if not (
        isinstance(condition, ast.Compare)
        and [type(op) for op in condition.ops] == [ast.Gt]
        and _name_of(condition.left) in _GUIDANCE_NAMES
    ):
        return None
    bound = condition.comparators[0]
    if not isinstance(bound, ast.Constant) or isinstance(bound.value, bool):
        return None
    return float(bound.value) if isinstance(bound.value, int | float) else None


def _name_of(node: ast.expr) -> str | None:
    """`x` for `x` and for `self.x`; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.attr if node.value.id == "self" else None
    return None


def _method(found: ast.ClassDef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for item in found.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == name:
            return item
    return None


@functools.cache
def _call_signature(pipeline: str) -> _Signature | None:
    found = _pipeline_class(pipeline)
    call = _method(found, "__call__") if found is not None else None
    if call is None:
        return None
    arguments = call.args
    names = [a.arg for a in arguments.posonlyargs + arguments.args]
    names += [a.arg for a in arguments.kwonlyargs]
    if arguments.kwarg is None:
        return _Signature(frozenset(names) - {"self"}, False)
    read = _keywords_only_read(call, arguments.kwarg.arg)
    if read is None:
        return _Signature(frozenset(names) - {"self"}, True)
    return _Signature(frozenset(names + read) - {"self"}, False)


def _keywords_only_read(
    call: ast.FunctionDef | ast.AsyncFunctionDef, kwarg: str
) -> list[str] | None:
    """The keys a call reads from its `**kwarg` when it only ever reads named ones
    (`kwargs.pop("callback", None)`, `kwargs.get(...)`), as Stable Diffusion's calls do for
    their deprecated callbacks: any other keyword is then dropped unread, and a typo in a
    registry entry's `call_kwargs` would change nothing without a word. None when the call
    uses the mapping otherwise (passes it on, indexes it): any keyword may then matter."""
    reads: list[str] = []
    methods: set[int] = set()
    for node in ast.walk(call):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        if not (isinstance(owner, ast.Name) and owner.id == kwarg):
            continue
        key = node.args[0] if node.args else None
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            continue
        if node.func.attr in ("pop", "get"):
            reads.append(key.value)
            methods.add(id(owner))
    uses = [n for n in ast.walk(call) if isinstance(n, ast.Name) and n.id == kwarg]
    return reads if all(id(n) in methods for n in uses) else None


@functools.cache
def _pipeline_class(pipeline: str) -> ast.ClassDef | None:
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
            return next(
                (
                    node
                    for node in ast.parse(text).body
                    if isinstance(node, ast.ClassDef) and node.name == pipeline
                ),
                None,
            )
    return None


def _diffusers_root() -> Path | None:
    # find_spec locates the package without executing it (and so without torch).
    spec = importlib.util.find_spec("diffusers")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))
