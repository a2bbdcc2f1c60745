"""Whether a preempted job of a model resumes at its step or restarts from step 0.

The worker resumes a job when the checkpoint carries the scheduler's step counter
(`_step_index`) at the step the job reached, or when the scheduler derives everything from
the timestep it is given (DDIM, DDPM): `worker.models.checkpoint` decides it at run time.
A job with an input image and a strength (img2img, inpainting) always restarts: it runs
only the tail of its schedule, which a checkpoint cannot resume into.
This module answers the same question without torch, for ListModels: the scheduler class
comes from the model folder's `scheduler/scheduler_config.json` (a local folder, or the
hub cache's copy of a hub id) or from the registry entry's `scheduler` field, and the
class's source in the installed diffusers is read with `ast`, never imported.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
from pathlib import Path
from typing import Literal

from mediamesh.common.registry import ModelSpec

Preemption = Literal["resume", "restart", ""]

# Schedulers whose `step` reads only the timestep it is given, the schedule and the
# generator: trimming the schedule to the remaining timesteps resumes them exactly.
TIMESTEP_DRIVEN_SCHEDULERS = frozenset({"DDIMScheduler", "CogVideoXDDIMScheduler", "DDPMScheduler"})
_SCHEDULER_CONFIG = "scheduler/scheduler_config.json"


def preemption_table(specs: list[ModelSpec], models_dir: Path) -> dict[str, Preemption]:
    """Model name -> "resume", "restart", or "" where the scheduler class is unknown (a
    hub model not pulled yet, a builtin model)."""
    return {spec.name: preemption_of(spec, models_dir) for spec in specs}


def preemption_of(spec: ModelSpec, models_dir: Path) -> Preemption:
    """What a preempted job of `spec` does (see the module docstring)."""
    if "image" in spec.inputs and "strength" in spec.accepted_fields:
        # An img2img or inpainting job runs only the tail of its schedule, cut by its
        # strength; a checkpoint counts the job's own steps, so the worker cannot resume
        # into that tail and restarts the job whatever its scheduler keeps.
        return "restart"
    scheduler = scheduler_class_of(spec, models_dir)
    if scheduler is None:
        return ""
    return "resume" if scheduler_resumes(scheduler) else "restart"


def scheduler_class_of(spec: ModelSpec, models_dir: Path) -> str | None:
    """The scheduler class a model loads with, read from its files without loading it."""
    source = spec.resolved_source(models_dir)
    local = Path(source)
    config = local / _SCHEDULER_CONFIG if local.is_dir() else _cached_config(spec)
    if config is None or not config.is_file():
        return None
    try:
        name = json.loads(config.read_text()).get("_class_name")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


def scheduler_resumes(scheduler: str) -> bool:
    """True when a checkpoint of this scheduler class can continue where it stopped.

    That needs a step counter that counts steps: second-order solvers (class attribute
    `order = 2`) count model calls, two per step, so they restart like PNDM, which keeps
    no counter at all."""
    if scheduler in TIMESTEP_DRIVEN_SCHEDULERS:
        return True
    facts = _scheduler_facts(scheduler)
    if facts is None:
        return False
    has_step_index, order = facts
    return has_step_index and order == 1


def _cached_config(spec: ModelSpec) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(spec.source, _SCHEDULER_CONFIG, revision=spec.revision)
    except Exception:
        # An id the hub library rejects (a path that does not exist, say) is simply unknown.
        return None
    return Path(found) if isinstance(found, str) else None


@functools.cache
def _scheduler_facts(scheduler: str) -> tuple[bool, int] | None:
    """(assigns self._step_index, class `order`) from the scheduler's source file."""
    if not scheduler.isidentifier():
        return None
    spec = importlib.util.find_spec("diffusers")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "schedulers"
    needle = f"class {scheduler}("
    for path in sorted(root.glob("scheduling_*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        if needle in text:
            return _facts_in(text, scheduler)
    return None


def _facts_in(source: str, scheduler: str) -> tuple[bool, int] | None:
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.ClassDef) and node.name == scheduler):
            continue
        order = 1
        for item in node.body:
            if (
                isinstance(item, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "order" for t in item.targets)
                and isinstance(item.value, ast.Constant)
                and isinstance(item.value.value, int)
            ):
                order = item.value.value
        has_step_index = any(
            isinstance(sub, ast.Attribute)
            and sub.attr == "_step_index"
            and isinstance(sub.ctx, ast.Store)
            for sub in ast.walk(node)
        )
        return has_step_index, order
    return None
