"""A loaded pipeline's device lookups skip diffusers' search for group-offloading hooks,
and answer what that search would have (see worker/models/device_lookups.py)."""

from __future__ import annotations

import pytest
import torch
from diffusers.hooks import apply_group_offloading, group_offloading
from wm_helpers import job_for, of, run

from mediamesh.common.work import JobFinished
from mediamesh.worker.models.device_lookups import (
    _NO_GROUP_OFFLOADING,
    mark_without_group_offloading,
)


@pytest.fixture
def flux(host_for):
    return host_for("flux-tiny")


def _count_searches(monkeypatch: pytest.MonkeyPatch) -> list[torch.nn.Module]:
    searched: list[torch.nn.Module] = []
    search = group_offloading._get_top_level_group_offload_hook

    def counted(module: torch.nn.Module):
        searched.append(module)
        return search(module)

    monkeypatch.setattr(group_offloading, "_get_top_level_group_offload_hook", counted)
    return searched


def test_a_generation_never_searches_the_modules_for_offloading_hooks(flux, monkeypatch) -> None:
    searched = _count_searches(monkeypatch)
    (finished,) = of(run(flux, [job_for(flux.spec, "a", seed=1)]), "a", JobFinished)
    assert finished.data
    assert searched == []


def test_the_result_is_the_same_bytes_as_with_every_module_searched(flux, monkeypatch) -> None:
    (shortcut,) = of(run(flux, [job_for(flux.spec, "a", seed=7)]), "a", JobFinished)
    components = [c for c in flux.pipeline.components.values() if isinstance(c, torch.nn.Module)]
    for component in components:
        monkeypatch.delitem(component.__dict__, _NO_GROUP_OFFLOADING)
    searched = _count_searches(monkeypatch)
    (plain,) = of(run(flux, [job_for(flux.spec, "a", seed=7)]), "a", JobFinished)
    assert searched, "the unmarked run should have searched"
    assert plain.data == shortcut.data


def _blocks() -> torch.nn.Module:
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])
    return model


class _Pipeline:
    def __init__(self, **components: object) -> None:
        self.components = components


def test_a_module_with_group_offloading_is_not_marked_and_keeps_its_onload_device() -> None:
    offloaded, plain = _blocks(), _blocks()
    apply_group_offloading(
        offloaded,
        onload_device=torch.device("cpu"),
        offload_type="block_level",
        num_blocks_per_group=1,
    )
    assert mark_without_group_offloading(_Pipeline(a=offloaded, b=plain, name="x")) == 1
    assert _NO_GROUP_OFFLOADING not in offloaded.__dict__
    assert group_offloading._get_group_onload_device(offloaded) == torch.device("cpu")
    with pytest.raises(ValueError, match="not enabled"):
        group_offloading._get_group_onload_device(plain)
