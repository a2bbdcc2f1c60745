"""Parallelism, warm-up and other registry numbers and names are checked at load, naming the
entry, the field and (from a file) its line, rather than failing a worker or being read
as something else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mediamesh.common.parallelism_spec import usable_modes
from mediamesh.common.registry import RegistryError, load_registry, parse_registry
from tests.unit.common.registry_entries import IMAGE, refusal

ECHO: dict[str, Any] = {**IMAGE, "pipeline": "Echo", "source": "builtin"}


@pytest.mark.parametrize(
    ("parallelism", "field", "device"),
    [
        ({"mode": "pipeline", "devices": ["gpu7"]}, "parallelism.devices.0", "'gpu7'"),
        (
            {"mode": "tensor", "size": 2, "devices": ["cpu", "foo"]},
            "parallelism.devices.1",
            "'foo'",
        ),
        (
            {"mode": "context", "ulysses": 2, "devices": ["cuda:0", "cuda1"]},
            "parallelism.devices.1",
            "'cuda1'",
        ),
    ],
)
def test_a_device_torch_cannot_name_is_refused_at_its_line(
    tmp_path: Path, parallelism: dict[str, Any], field: str, device: str
) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [{**IMAGE, "parallelism": parallelism}]}))
    with pytest.raises(RegistryError) as caught:
        load_registry(path)
    line = next(
        i for i, text in enumerate(path.read_text().splitlines(), 1) if device[1:-1] in text
    )
    assert str(caught.value) == (
        f"{path}: line {line}: model 'mine' field {field}: {device} is not a device; "
        "use cpu, mps, cuda or cuda:N"
    )


def test_the_devices_torch_names_are_accepted() -> None:
    devices = ["cpu", "mps", "cuda", "cuda:3"]
    entry = {**IMAGE, "parallelism": {"mode": "pipeline", "devices": devices}}
    assert parse_registry({"models": [entry]}).models[0].parallelism.devices == devices


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"parallelism": {"mode": "tensor", "size": True}}, "parallelism.size"),
        ({"parallelism": {"mode": "tensor", "size": "2"}}, "parallelism.size"),
        ({"parallelism": {"mode": "tensor", "size": 2.0}}, "parallelism.size"),
        ({"parallelism": {"mode": "context", "ulysses": True, "ring": 2}}, "parallelism.ulysses"),
        ({"parallelism": {"mode": "context", "ulysses": 2, "ring": 2.0}}, "parallelism.ring"),
        ({"warmup": [{"batch": True}]}, "warmup.0.batch"),
        ({"warmup": [{"steps": "2"}]}, "warmup.0.steps"),
        ({"warmup": [{"width": 64.0}]}, "warmup.0.width"),
        ({"warmup": [{"duration_s": True}]}, "warmup.0.duration_s"),
        ({"output": {"quality": True}}, "output.quality"),
        ({"cost": {"overhead_s": True}}, "cost.overhead_s"),
        ({"cost": {"step_s_per_megapixel": "0.5"}}, "cost.step_s_per_megapixel"),
    ],
)
def test_numbers_of_another_yaml_type_are_refused(changes: dict[str, Any], field: str) -> None:
    message = refusal(IMAGE, **changes)
    assert f"field {field}: Input should be a valid" in message


def test_video_fps_of_another_yaml_type_is_refused() -> None:
    video = {
        **IMAGE,
        "modality": "video",
        "pipeline": "WanPipeline",
        "defaults": {"width": 64, "height": 64, "num_frames": 5},
        "limits": {"max_width": 64, "max_height": 64, "max_num_frames": 9},
    }
    assert "field output.fps: Input should be a valid integer" in refusal(
        video, output={"fps": True}
    )


def test_numbers_of_their_own_type_still_load() -> None:
    entry = {
        **IMAGE,
        "parallelism": {"mode": "tensor", "size": 2},
        "warmup": [{"width": 64, "steps": 2, "batch": 2}],
        "cost": {"overhead_s": 0, "step_s_per_megapixel": 1},
    }
    spec = parse_registry({"models": [entry]}).models[0]
    assert (spec.parallelism.size, spec.warmup[0].batch, spec.cost.overhead_s) == (2, 2, 0)


@pytest.mark.parametrize(
    "parallelism",
    [
        {"mode": "tensor", "size": 2},
        {"mode": "pipeline"},
        {"mode": "context", "ulysses": 2},
    ],
)
def test_echo_refuses_a_parallel_mode_it_would_ignore(parallelism: dict[str, Any]) -> None:
    message = refusal(ECHO, parallelism=parallelism)
    assert "parallelism.mode: the builtin Echo model runs no torch" in message
    assert f"so {parallelism['mode']} mode would be ignored; use data mode" in message


def test_echo_takes_the_data_mode() -> None:
    spec = parse_registry({"models": [{**ECHO, "parallelism": {"mode": "data"}}]}).models[0]
    assert spec.parallelism.mode == "data"


def test_a_default_past_an_unset_limit_names_the_limit() -> None:
    message = refusal(IMAGE, limits={})
    assert "defaults.width=64 exceeds limits.max_width, which is unset (0)" in message
    message = refusal(IMAGE, limits={"max_width": 32, "max_height": 64})
    assert "defaults.width=64 exceeds limits.max_width (32)" in message


@pytest.mark.parametrize(
    ("pipeline", "besides", "suggested"),
    [
        ("StableDiffusion3Pipeline", "context", "data or pipeline"),
        ("WanPipeline", "tensor", "data or pipeline"),
        ("FluxPipeline", "context", "data, pipeline or tensor"),
        ("FluxPipeline", "pipeline", "data or tensor"),
    ],
)
def test_a_refusal_suggests_only_modes_the_pipeline_can_use(
    pipeline: str, besides: str, suggested: str
) -> None:
    assert usable_modes(pipeline, besides) == suggested
