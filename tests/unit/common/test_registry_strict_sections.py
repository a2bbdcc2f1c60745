"""The registry's remaining sections take YAML's own types, as its numbers already do: a
step cache's numbers, the GPU options' switches, the preview switch and factors, and an
adapter's default scale. Before, `threshold: true` was read as 1.0 and `tiling: 1` or
`enabled: "yes"` as true, each silently."""

from __future__ import annotations

import copy

import pytest
import yaml

from mediamesh.common.registry import DEFAULT_REGISTRY, RegistryError, parse_registry

FLUX = next(
    e for e in yaml.safe_load(DEFAULT_REGISTRY.read_text())["models"] if e["name"] == "flux-tiny"
)


def with_fields(**extra: object) -> dict:
    entry = copy.deepcopy(FLUX)
    entry.update(extra)
    return {"models": [entry]}


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"cache": {"kind": "first-block", "threshold": True}}, "cache.first-block.threshold"),
        ({"cache": {"kind": "mag", "max_skip_steps": 2.0}}, "cache.mag.max_skip_steps"),
        (
            {"cache": {"kind": "pab", "spatial_attention_timestep_skip_range": ["100", 800]}},
            "cache.pab.spatial_attention_timestep_skip_range.0",
        ),
        ({"gpu": {"vae": {"tiling": 1}}}, "gpu.vae.tiling"),
        ({"gpu": {"compile": {"mode": "regional", "dynamic": "no"}}}, "gpu.compile.dynamic"),
        ({"preview": {"enabled": "yes"}}, "preview.enabled"),
        (
            {"adapters": [{"name": "s", "source": "x", "default_scale": True}]},
            "adapters.0.default_scale",
        ),
    ],
)
def test_a_value_of_another_yaml_type_is_refused_naming_its_field(extra: dict, field: str) -> None:
    with pytest.raises(RegistryError) as refused:
        parse_registry(with_fields(**extra))
    assert f"field {field}: Input should be a valid" in str(refused.value)


@pytest.mark.parametrize(
    "extra",
    [
        {"cache": {"kind": "mag", "mag_ratios": [1.0, 0.9, 1]}},
        {"cache": {"kind": "pab", "spatial_attention_timestep_skip_range": [100, 800]}},
        {"gpu": {"vae": {"tiling": True}}},
        {"preview": {"rgb_factors": [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]]}},
        {"adapters": [{"name": "s", "source": "x", "default_scale": 1}]},
    ],
)
def test_values_of_their_own_type_still_load(extra: dict) -> None:
    parse_registry(with_fields(**extra))
