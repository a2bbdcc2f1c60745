"""Registry and config errors name the entry and the field, at start."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.params import RequestFields, resolve
from mediamesh.common.registry import (
    DEFAULT_REGISTRY,
    RegistryError,
    load_registry,
    parse_registry,
)
from mediamesh.common.settings import ConfigError, load_mesh_config

DEFAULTS = yaml.safe_load(DEFAULT_REGISTRY.read_text())


def with_change(name: str, path: list[str], value: object) -> dict:
    raw = copy.deepcopy(DEFAULTS)
    entry = next(e for e in raw["models"] if e["name"] == name)
    node = entry
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return raw


@pytest.mark.parametrize(
    ("name", "path", "value", "words"),
    [
        ("flux-tiny", ["modality"], "hologram", "model 'flux-tiny' field modality"),
        ("wan-tiny", ["batching", "max_batch"], 0, "model 'wan-tiny' field batching.max_batch"),
        ("flux-tiny", ["defaults", "steps"], 99, "defaults.steps=99 exceeds limits.max_steps (50)"),
        ("flux-tiny", ["parallelism", "mode"], "magic", "field parallelism.mode"),
        ("echo", ["quantization"], "int4", "model 'echo' field quantization"),
        ("flux-tiny", ["colour"], "red", "model 'flux-tiny' field colour"),
        ("stable-audio-tiny", ["output", "format"], "pcm", "field output.format"),
    ],
)
def test_bad_registry_entries_name_the_entry_and_field(name, path, value, words):
    with pytest.raises(RegistryError) as caught:
        parse_registry(with_change(name, path, value), "models.yaml")
    assert words in str(caught.value)
    assert str(caught.value).startswith("models.yaml:")


def test_duplicate_names_and_unreadable_files(tmp_path: Path):
    raw = copy.deepcopy(DEFAULTS)
    raw["models"].append(copy.deepcopy(raw["models"][0]))
    with pytest.raises(RegistryError, match="appears twice"):
        parse_registry(raw)
    with pytest.raises(RegistryError, match="cannot read registry"):
        load_registry(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("models: [\n")
    with pytest.raises(RegistryError, match="not valid YAML"):
        load_registry(broken)


def test_config_errors_name_the_field(tmp_path: Path):
    path = tmp_path / "mesh.yaml"
    path.write_text("scheduler: {queues: {image: {sla_s: -1}}}\ngateway: {portt: 1}\n")
    with pytest.raises(ConfigError) as caught:
        load_mesh_config(path)
    assert "scheduler.queues.image.sla_s" in str(caught.value)
    assert "gateway.portt" in str(caught.value)


def test_partial_placement_keeps_defaults_for_other_classes():
    config = load_mesh_config(None, {"scheduler.placement": {"BATCH": {"prefer": "on-demand"}}})
    assert set(config.scheduler.placement) == {"REALTIME", "STANDARD", "BATCH"}
    assert config.scheduler.placement["BATCH"].prefer == "on-demand"


def test_pricing_one_pool_keeps_the_other_pools_default_price():
    config = load_mesh_config(None, {"scheduler.prices_per_device_hour": {"spot": 1.2}})
    assert config.scheduler.prices_per_device_hour == {"on-demand": 4.0, "spot": 1.2}
    with pytest.raises(ConfigError) as refused:
        load_mesh_config(None, {"scheduler.prices_per_device_hour": {"spot": -1}})
    assert "spot: -1.0 is not a price" in str(refused.value)


def test_defaults_apply_and_a_seed_is_chosen():
    spec = load_registry().get("flux-tiny")
    params = resolve(spec, RequestFields(model="flux-tiny", prompt="p"))
    assert (params.steps, params.width, params.height) == (4, 64, 64)
    assert 0 <= params.seed < 2**63
    audio = resolve(
        load_registry().get("stable-audio-tiny"), RequestFields("stable-audio-tiny", "p")
    )
    assert audio.duration_s == 1.0 and audio.width == 0


def test_a_timeout_of_zero_is_refused_rather_than_read_as_none():
    spec = load_registry().get("flux-tiny")
    with pytest.raises(InvalidArgument) as refused:
        resolve(spec, RequestFields(model="flux-tiny", prompt="p", timeout_ms=0))
    assert str(refused.value) == (
        "timeout_ms: 0 is out of range; allowed 1..4294967295; leave it unset for no limit"
    )
    assert resolve(spec, RequestFields(model="flux-tiny", prompt="p", timeout_ms=1)).steps == 4
