"""Diffusers' device lookups, answered without searching every module for offloading hooks.

A diffusers pipeline call asks several times where its components run
(`DiffusionPipeline._execution_device`, a model's `.device`, `get_module_execution_device`
before the VAE decodes). Each ask starts with `_get_group_onload_device`, which looks for a
group-offloading hook in every submodule of the component and, finding none, raises
ValueError, on which the caller looks for the device its other ways. On a Flux-sized
pipeline that is thousands of attribute checks per ask; on flux-tiny with one CPU thread,
py-spy put it at 9 % of the worker's time at c=1, about 2 ms of a 17 ms call.

The mesh never applies group offloading (a registry entry's `gpu.offload` is none, model
or sequential, all accelerate hooks). So once a pipeline is placed, each component with no
group-offloading hook is marked, and for a marked module the lookup raises at once what
the search would have raised. Every other module, and every other lookup, is diffusers'
own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger(__name__)

# In a component's __dict__: no submodule had a group-offloading hook once it was placed.
_NO_GROUP_OFFLOADING = "_mediamesh_no_group_offloading"


def mark_without_group_offloading(pipeline: Any) -> int:
    """Mark the pipeline's components that have no group-offloading hook; how many were."""
    group_offloading = _install()
    if group_offloading is None:
        return 0
    marked = 0
    for component in pipeline.components.values():
        if not isinstance(component, torch.nn.Module):
            continue
        if group_offloading._get_top_level_group_offload_hook(component) is None:
            # Straight into __dict__: nn.Module's __setattr__ would do the same for a bool,
            # but this says it is not a parameter, buffer or submodule.
            component.__dict__[_NO_GROUP_OFFLOADING] = True
            marked += 1
    return marked


def _install() -> Any:
    """Put the marked-module shortcut in front of diffusers' lookup, once per process; the
    diffusers module, or None when this diffusers has no such lookup to shortcut."""
    try:
        from diffusers.hooks import group_offloading
    except ImportError:
        return None
    searched = getattr(group_offloading, "_get_group_onload_device", None)
    if searched is None or not hasattr(group_offloading, "_get_top_level_group_offload_hook"):
        log.debug("this diffusers has no group-offloading lookup; device lookups unchanged")
        return None
    if not getattr(searched, "shortcut_marked", False):
        group_offloading._get_group_onload_device = _shortcut(searched)
    return group_offloading


def _shortcut(searched: Callable[[torch.nn.Module], torch.device]) -> Any:
    # Diffusers imports the lookup inside each function that uses it, at call time, so
    # replacing the module's attribute reaches every caller.
    def onload_device(module: torch.nn.Module) -> torch.device:
        if module.__dict__.get(_NO_GROUP_OFFLOADING):
            raise ValueError("Group offloading is not enabled for the provided module.")
        return searched(module)

    onload_device.shortcut_marked = True  # type: ignore[attr-defined]
    return onload_device
