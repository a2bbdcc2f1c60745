"""The registry's `cache` entry and the request's `cache` switch, as pure values."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from mediamesh.common.api.requests import request_fields
from mediamesh.common.api.worker_wire import job_params, job_spec
from mediamesh.common.generated.v1 import common_pb2
from mediamesh.common.params import RequestFields, resolve
from mediamesh.common.registry import ModelSpec, RegistryError, parse_registry
from mediamesh.common.step_cache import CACHE_KINDS
from mediamesh.common.work import JobParams

BASE: dict[str, Any] = {
    "name": "m",
    "modality": "image",
    "pipeline": "FluxPipeline",
    "source": "x",
    "defaults": {"width": 64, "height": 64},
    "limits": {"max_width": 64, "max_height": 64},
}


def spec_with(cache: dict[str, Any] | None) -> ModelSpec:
    return parse_registry({"models": [{**BASE, "cache": cache}]}).models[0]


@pytest.mark.parametrize("kind", CACHE_KINDS)
def test_every_kind_parses_with_its_defaults(kind: str) -> None:
    spec = spec_with({"kind": kind})
    assert spec.cache is not None and spec.cache.kind == kind


@pytest.mark.parametrize(
    ("cache", "message"),
    [
        ({"kind": "teacache"}, "model 'm' field cache: .*'first-block'"),
        ({"kind": "first-block", "threshold": 0}, "field cache.first-block.threshold"),
        ({"kind": "mag", "cache_interval": 2}, "field cache.mag.cache_interval"),
        ({"kind": "mag", "mag_ratios": [1.0]}, "mag_ratios: needs at least two"),
        (
            {"kind": "pab", "spatial_attention_block_skip_range": None},
            "set at least one",
        ),
        (
            {"kind": "faster", "spatial_attention_timestep_skip_range": [900, 100]},
            "spatial_attention_timestep_skip_range: the first timestep",
        ),
    ],
)
def test_bad_cache_entries_name_model_and_field(cache: dict[str, Any], message: str) -> None:
    with pytest.raises(RegistryError, match=message):
        spec_with(cache)


@pytest.mark.parametrize(
    ("cache", "asked", "runs_cached"),
    [
        ({"kind": "first-block"}, None, True),
        ({"kind": "first-block"}, True, True),
        ({"kind": "first-block"}, False, False),
        # No cache to turn off: accepted, and recorded as the default so batches still mix.
        (None, False, True),
    ],
)
def test_request_cache_switch(cache: dict[str, Any] | None, asked: bool | None, runs_cached: bool):
    params = resolve(spec_with(cache), RequestFields(model="m", prompt="p", seed=1, cache=asked))
    assert params.use_cache is runs_cached


def test_cache_switch_travels_from_request_to_worker() -> None:
    request = common_pb2.GenerateRequest(model="m", prompt="p", cache=False)
    assert request_fields(request).cache is False
    assert request_fields(common_pb2.GenerateRequest(model="m", prompt="p")).cache is None
    params = resolve(spec_with({"kind": "mag"}), request_fields(request))
    for use_cache in (False, True):
        job = JobParams("j", dataclasses.replace(params, use_cache=use_cache))
        assert job_params(job_spec(job, 0)).generation.use_cache is use_cache
