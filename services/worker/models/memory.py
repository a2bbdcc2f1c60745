"""How much memory a device has, and whether a model's weights fit before loading them."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

from mediamesh.common.errors import StartupError

MIB = 1024 * 1024
# Weights are not all: activations, the VAE decode and allocator slack need room too.
HEADROOM = 1.2
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class ModelLoadError(StartupError):
    """A model that cannot be loaded here, with a reason an operator can act on."""


def one_line(exc: BaseException) -> str:
    """`Class: message` of an exception with its whitespace collapsed, for a one-line error."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def checkpoint_parameters(name: str, model_dir: Path, source: str) -> int:
    """`weight_parameters`, or a ModelLoadError naming the model when a header is unreadable."""
    try:
        return weight_parameters(model_dir)
    except Exception as exc:
        raise ModelLoadError(
            f"model {name!r} (source {source}): cannot read the weight files' headers: "
            f"{one_line(exc)}; a .safetensors file is damaged or cut short, "
            "copy or pull the model again"
        ) from exc


def device_memory(device: str) -> tuple[int, int]:
    """(total_bytes, free_bytes) of a device: CUDA from the driver, CPU from /proc/meminfo."""
    target = torch.device(device)
    if target.type == "cuda":
        free, total = torch.cuda.mem_get_info(target)
        return int(total), int(free)
    fields: dict[str, int] = {}
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            name, _, rest = line.partition(":")
            fields[name] = int(rest.split()[0]) * 1024
    return fields["MemTotal"], fields.get("MemAvailable", fields["MemFree"])


def weight_parameters(model_dir: Path) -> int:
    """Parameters stored in a local checkpoint, read from the safetensors headers only.

    Only the component folders named in model_index.json count (hub repositories also hold
    single-file copies), and variant files such as `*.fp16.safetensors` are skipped.
    """
    folders = [model_dir / name for name in components_of(model_dir)] or [model_dir]
    total = 0
    for folder in folders:
        tensors = [p for p in folder.rglob("*.safetensors") if p.name.count(".") == 1]
        for path in tensors:
            total += _safetensors_parameters(path)
        if not tensors:
            # Pickled weights have no cheap header; assume float32 storage.
            total += sum(p.stat().st_size // 4 for p in folder.rglob("*.bin"))
    return total


def components_of(model_dir: Path) -> list[str]:
    index = model_dir / "model_index.json"
    if not index.is_file():
        return []
    entries = json.loads(index.read_text())
    return [name for name, value in entries.items() if isinstance(value, list)]


def _safetensors_parameters(path: Path) -> int:
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    total = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        count = 1
        for size in entry["shape"]:
            count *= size
        total += count
    return total


def check_fits(model: str, needed_bytes: int, device: str) -> None:
    """Raises ModelLoadError when `needed_bytes` (with headroom) exceed the free memory."""
    _total, free = device_memory(device)
    needed = int(needed_bytes * HEADROOM)
    if needed > free:
        raise ModelLoadError(
            f"model {model!r} needs {needed // MIB} MiB on {device} but only {free // MIB} MiB free"
        )
