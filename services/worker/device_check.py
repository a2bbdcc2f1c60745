"""Whether the CUDA or MPS devices a worker is configured with exist, checked before any model
loads.

Without it, a `cuda:N` this process cannot see failed deep inside torch: on a CPU build
`torch.cuda.mem_get_info` raises a bare AssertionError ("Torch not compiled with CUDA
enabled"), a traceback instead of one line naming the setting to change.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from mediamesh.common.errors import StartupError
from mediamesh.common.registry import ModelSpec
from mediamesh.common.settings import WorkerSettings


def refuse_unavailable_devices(worker: WorkerSettings, specs: Iterable[ModelSpec]) -> None:
    """StartupError naming the first setting whose CUDA or MPS device is absent (blocking:
    torch asks the driver, so call it off the event loop)."""
    settings = [(f"worker {worker.worker_id!r} field device", worker.device)]
    for spec in specs:
        options = spec.parallelism
        settings += [(f"model {spec.name!r} field parallelism.devices", d) for d in options.devices]
        settings += [
            (f"model {spec.name!r} field parallelism.max_memory", d) for d in options.max_memory
        ]
    for setting, device in settings:
        problem = _absent(device)
        if problem is not None:
            raise StartupError(f"{setting}: {device}: {problem}")


def _absent(device: str) -> str | None:
    """Why `device` cannot be used here, or None (and None for what is neither CUDA nor
    MPS)."""
    if device == "mps" or device.startswith("mps:"):
        if torch.backends.mps.is_available():
            return None
        return (
            "mps is not available on this host (no Apple GPU, or a torch build without MPS); "
            "set the device to cpu or cuda"
        )
    if device != "cuda" and not device.startswith("cuda:"):
        return None
    try:
        index = torch.device(device).index or 0
    except RuntimeError:
        return "not a device name; write cuda or cuda:N"
    if not torch.cuda.is_available():
        build = (
            "this torch build has no CUDA" if torch.version.cuda is None else "no GPU is visible"
        )
        return f"{build} (torch {torch.__version__}); run on a GPU host or set the device to cpu"
    count = torch.cuda.device_count()
    if index >= count:
        return (
            f"only {count} GPU(s) visible (cuda:0 to cuda:{count - 1}); check "
            "CUDA_VISIBLE_DEVICES and the GPUs given to the container"
        )
    return None
