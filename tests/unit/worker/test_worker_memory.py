from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from mediamesh.worker.models import memory


def test_cpu_memory_is_read_from_proc_meminfo() -> None:
    total, free = memory.device_memory("cpu")
    assert 0 < free <= total


def test_check_fits_names_model_sizes_and_device(monkeypatch) -> None:
    monkeypatch.setattr(memory, "device_memory", lambda _d: (8 << 30, 100 * memory.MIB))
    memory.check_fits("small", 10 * memory.MIB, "cpu")
    with pytest.raises(memory.ModelLoadError) as raised:
        memory.check_fits("big", 1000 * memory.MIB, "cpu")
    assert str(raised.value) == "model 'big' needs 1200 MiB on cpu but only 100 MiB free"


def test_weight_parameters_counts_components_and_skips_variants(tmp_path) -> None:
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "X", "unet": ["d", "U"]}))
    (tmp_path / "unet").mkdir()
    save_file({"w": torch.zeros(10, 3), "b": torch.zeros(5)}, tmp_path / "unet" / "m.safetensors")
    save_file({"w": torch.zeros(10, 3)}, tmp_path / "unet" / "m.fp16.safetensors")
    save_file({"w": torch.zeros(1000)}, tmp_path / "single_file.safetensors")
    assert memory.weight_parameters(tmp_path) == 35
