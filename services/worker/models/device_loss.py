"""Telling a broken accelerator from a failed call.

A sticky CUDA error (an illegal memory access, a device-side assert, an uncorrectable ECC
error, a GPU that fell off the bus) leaves the process's CUDA context unusable: every later
call fails the same way. Failing each batch's jobs as INTERNAL then makes the worker look
fast and idle, so it draws ever more work it can only fail. Such a worker must stop taking
batches and restart; its jobs go back in line (`DeviceGroupLost`, UNAVAILABLE).

torch raises `AcceleratorError` for every CUDA error code, the sticky ones and ones a single
call caused (an invalid launch configuration at some odd shape), so a fault is confirmed
by probing the devices: a context that still runs a kernel and synchronises is not lost.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from mediamesh.worker.core.batch import DeviceGroupLost
from mediamesh.worker.models.memory import one_line
from mediamesh.worker.models.out_of_memory import is_out_of_memory


def device_lost(exc: BaseException, devices: Iterable[str | torch.device]) -> bool:
    """Whether `exc` says the accelerator behind `devices` is gone, not that one call failed.

    Out-of-memory is a failed call (the batch runs again in halves). On a host with no CUDA
    device listed the error cannot be probed: it counts as lost, since an accelerator the
    worker does not know of failed, and restarting is the safe way out."""
    if not isinstance(exc, torch.AcceleratorError) or is_out_of_memory(exc):
        return False
    cuda = [d for d in map(torch.device, devices) if d.type == "cuda"]
    return not cuda or not all(_answers(device) for device in cuda)


def _answers(device: torch.device) -> bool:
    try:
        torch.cuda.synchronize(device)
        # `.item()` waits for the kernel: a launch alone can succeed on a dead context.
        return bool((torch.ones(1, device=device) + 1).item() == 2)
    except Exception:
        return False


def lost_devices(model: str, devices: Iterable[str], exc: BaseException) -> DeviceGroupLost:
    """The error a host raises, leaving its batch's unfinished jobs unreported."""
    return DeviceGroupLost(
        f"device {', '.join(devices)} of model {model!r} stopped working: {one_line(exc)}"
    )
