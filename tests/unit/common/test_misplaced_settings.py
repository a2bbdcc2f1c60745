"""Registry settings that another mode or modality would silently ignore are refused at load,
naming the entry, the field and what takes it."""

from __future__ import annotations

from typing import Any

import pytest

from mediamesh.common.registry import load_registry, parse_registry
from tests.unit.common.registry_entries import AUDIO, IMAGE, VIDEO, accepted, refusal


@pytest.mark.parametrize(
    ("parallelism", "named"),
    [
        (
            {"mode": "data", "size": 4, "devices": ["cuda:0", "cuda:1"], "backend": "deepspeed"},
            [
                "parallelism.devices: only pipeline, tensor or context mode takes it",
                "parallelism.size: only tensor mode takes it",
                "parallelism.backend: only tensor mode takes it",
                "not data mode",
            ],
        ),
        ({"mode": "data", "device_map": "auto"}, ["parallelism.device_map: only pipeline mode"]),
        (
            {"mode": "data", "max_memory": {"cpu": "1GiB"}},
            ["parallelism.max_memory: only pipeline"],
        ),
        (
            {"mode": "data", "offload_folder": "/tmp/o"},
            ["parallelism.offload_folder: only pipeline"],
        ),
        (
            {"mode": "pipeline", "devices": ["cpu"], "size": 2},
            ["parallelism.size: only tensor mode takes it, not pipeline mode"],
        ),
        (
            {"mode": "context", "ulysses": 2, "size": 2},
            ["parallelism.size: only tensor mode takes it, not context mode"],
        ),
        (
            {"mode": "context", "ulysses": 2, "backend": "deepspeed"},
            ["parallelism.backend: only tensor mode takes it, not context mode"],
        ),
        (
            {"mode": "tensor", "size": 2, "device_map": "sequential"},
            ["parallelism.device_map: only pipeline mode takes it, not tensor mode"],
        ),
        # Set to the default value is still set: the author expected it to do something.
        ({"mode": "data", "device_map": "balanced"}, ["parallelism.device_map: only pipeline"]),
        ({"mode": "data", "size": 1}, ["parallelism.size: only tensor mode takes it"]),
        ({"mode": "pipeline", "backend": "torch"}, ["parallelism.backend: only tensor mode"]),
        ({"mode": "data", "devices": []}, ["parallelism.devices: only pipeline, tensor"]),
        ({"mode": "tensor", "ulysses": 2}, ["parallelism.ulysses: only context mode takes it"]),
        ({"mode": "data", "ring": 1}, ["parallelism.ring: only context mode takes it"]),
    ],
)
def test_a_parallelism_field_outside_its_mode_is_refused(
    parallelism: dict[str, Any], named: list[str]
) -> None:
    message = refusal(IMAGE, parallelism=parallelism)
    for words in named:
        assert words in message, message


def test_each_mode_takes_its_own_fields() -> None:
    pipeline = accepted(
        IMAGE,
        parallelism={
            "mode": "pipeline",
            "devices": ["cuda:0", "cuda:1"],
            "device_map": "auto",
            "max_memory": {"cuda:0": "70GiB", "cuda:1": "70 GiB", "cpu": "1.5GB", "disk": "600KB"},
            "offload_folder": "/scratch/offload",
        },
    ).parallelism
    assert pipeline.max_memory["cpu"] == "1.5GB"
    tensor = accepted(
        IMAGE, parallelism={"mode": "tensor", "size": 2, "devices": ["cpu", "cpu"]}
    ).parallelism
    assert tensor.ranks == 2
    assert accepted(IMAGE, parallelism={"mode": "tensor", "backend": "deepspeed"}).parallelism


def test_entries_dumped_with_every_field_read_back() -> None:
    # A tensor-parallel helper rank rebuilds its spec from `model_dump()`, defaults and all;
    # a dumped spec leaves out the fields its mode does not read.
    for spec in load_registry().models:
        for dumped in (spec.model_dump(mode="json"), spec.model_dump()):
            again = parse_registry({"models": [dumped]}).models[0]
            assert again == spec
    for options in ({"mode": "pipeline", "device_map": "auto"}, {"mode": "tensor", "size": 2}):
        spec = accepted(IMAGE, parallelism=options)
        assert parse_registry({"models": [spec.model_dump()]}).models[0] == spec
        assert spec.parallelism.model_dump().keys() >= options.keys()


@pytest.mark.parametrize("devices", [["cpu", "cpu", "cpu"], ["cpu"]])
def test_tensor_devices_must_match_its_size(devices: list[str]) -> None:
    message = refusal(IMAGE, parallelism={"mode": "tensor", "size": 2, "devices": devices})
    assert f"parallelism.devices: {len(devices)} devices listed" in message
    assert "parallelism.size is 2" in message


@pytest.mark.parametrize("limit", ["lots", "10", "10TB", "-1GB", "GiB", 1.5, True, None])
def test_max_memory_sizes_accelerate_cannot_read_are_refused(limit: object) -> None:
    message = refusal(
        IMAGE, parallelism={"mode": "pipeline", "devices": ["cpu"], "max_memory": {"cpu": limit}}
    )
    assert f"parallelism.max_memory.cpu: {limit!r} is not a memory size" in message
    assert "GiB" in message


def test_accepted_max_memory_sizes_are_ones_accelerate_reads() -> None:
    from accelerate.utils import convert_file_size_to_int

    sizes = ["70GiB", "500MB", "600KB", "1.5GB", "2 MiB", "3kib", "0GB", 10**9, 0]
    entry = accepted(
        IMAGE,
        parallelism={
            "mode": "pipeline",
            "max_memory": {f"cuda:{i}": size for i, size in enumerate(sizes)},
        },
    )
    for size in entry.parallelism.max_memory.values():
        assert convert_file_size_to_int(size) >= 0
    assert entry.parallelism.max_memory["cuda:7"] == 10**9  # a byte count stays a number


def test_negative_byte_counts_are_refused() -> None:
    message = refusal(IMAGE, parallelism={"mode": "pipeline", "max_memory": {"cpu": -5}})
    assert "parallelism.max_memory.cpu: -5 bytes; a memory cap cannot be below 0" in message


@pytest.mark.parametrize("device", ["gpu0", "cuda:x", "CPU", "cuda:"])
def test_max_memory_devices_accelerate_cannot_place_are_refused(device: str) -> None:
    message = refusal(IMAGE, parallelism={"mode": "pipeline", "max_memory": {device: "1GiB"}})
    assert f"parallelism.max_memory: {device!r} is not a device" in message


@pytest.mark.parametrize(
    ("entry", "output", "words"),
    [
        (IMAGE, {"fps": 12}, "output.fps: image models have no frame rate"),
        (AUDIO, {"fps": 12}, "output.fps: audio models have no frame rate"),
        (AUDIO, {"quality": 50}, "output.quality: audio models have no encoder quality"),
        (VIDEO, {"quality": 50}, "output.quality: video models have no encoder quality"),
    ],
)
def test_output_settings_of_another_modality_are_refused(
    entry: dict[str, Any], output: dict[str, Any], words: str
) -> None:
    assert words in refusal(entry, output=output)


def test_output_settings_of_the_entry_modality_are_kept() -> None:
    # The README's example entry.
    image = accepted(IMAGE, output={"format": "webp", "formats": ["webp", "png"], "quality": 85})
    assert image.output.quality == 85
    assert accepted(VIDEO, output={"fps": 12}).output.fps == 12


def test_a_preview_bias_without_factors_is_refused() -> None:
    message = refusal(IMAGE, preview={"rgb_bias": [0.1, 0.0, 0.0]})
    assert "preview.rgb_bias: applies only to the entry's own preview.rgb_factors" in message
    own = accepted(IMAGE, preview={"rgb_factors": [[1, 0, 0]] * 4, "rgb_bias": [0.1, 0, 0]})
    assert own.preview.rgb_bias == (0.1, 0.0, 0.0)


@pytest.mark.parametrize(
    ("preview", "field"),
    [({"rgb_factors": [[1, 0, 0]] * 4}, "preview.rgb_factors"), ({"vae": "/taesd"}, "preview.vae")],
)
def test_audio_entries_take_no_rgb_preview_decoder(preview: dict[str, Any], field: str) -> None:
    assert f"{field}: audio previews are heat maps" in refusal(AUDIO, preview=preview)
