"""How a registry entry spreads its model over devices (`parallelism:`), and the checks that
keep each mode's fields to that mode."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from mediamesh.common.context_spec import check_context_degrees

# The modes that read each mode-specific parallelism field. Set outside them, a field would
# change nothing.
MODE_FIELDS: dict[str, tuple[str, ...]] = {
    "devices": ("pipeline", "tensor", "context"),
    "device_map": ("pipeline",),
    "max_memory": ("pipeline",),
    "offload_folder": ("pipeline",),
    "size": ("tensor",),
    "backend": ("tensor",),
    "ulysses": ("context",),
    "ring": ("context",),
}
# accelerate's `max_memory` sizes (`accelerate.utils.convert_file_size_to_int`): a number and
# a decimal or binary unit, or a whole number of bytes. Matched here because importing
# accelerate would import torch.
_MEMORY_SIZE = re.compile(r"^\s*\d+(\.\d*)?\s*([KMG]i?B)$", re.IGNORECASE)
# The devices a model can be placed on: "cpu", "mps" and GPUs by index (torch.device
# names). accelerate's `max_memory` also takes "disk", where it spills past the caps.
_DEVICE = re.compile(r"^(cpu|mps|cuda|cuda:\d+)$")
_MEMORY_DEVICE = re.compile(r"^(cpu|disk|mps|cuda|cuda:\d+)$")
# The pipelines `worker/parallel/tensor_host.py` can split over a tensor-parallel group; the
# worker refuses tensor mode for any other at start (`worker/models/preflight.py`).
TENSOR_PARALLEL_PIPELINES = frozenset({"FluxPipeline"})


def check_memory_size(field: str, limit: object) -> None:
    """ValueError naming `field` when `limit` is not a size accelerate can read."""
    if isinstance(limit, int) and not isinstance(limit, bool):
        if limit < 0:
            raise ValueError(f"{field}: {limit} bytes; a memory cap cannot be below 0")
        return
    if not (isinstance(limit, str) and _MEMORY_SIZE.match(limit)):
        raise ValueError(
            f"{field}: {limit!r} is not a memory size; write a number and a unit "
            "(KB, MB, GB, KiB, MiB or GiB), like 70GiB or 500MB, or a whole number of bytes"
        )


def check_memory_device(field: str, device: object) -> None:
    """ValueError naming `field` when `device` is not a key accelerate's max_memory takes."""
    if not (isinstance(device, str) and _MEMORY_DEVICE.match(device)):
        raise ValueError(f"{field}: {device!r} is not a device; use cpu, disk, mps, cuda or cuda:N")


def _placeable_device(device: str) -> str:
    # Checked when the registry loads: torch would refuse the name only in the worker, in
    # an error naming neither the entry nor the field. pydantic's error names the item.
    if not _DEVICE.match(device):
        raise ValueError(f"{device!r} is not a device; use cpu, mps, cuda or cuda:N")
    return device


Device = Annotated[str, AfterValidator(_placeable_device)]


def usable_modes(pipeline: str, besides: str) -> str:
    """The parallelism modes other than `besides` that `pipeline` may use, as a refusal
    suggests them ("data or pipeline"). Context mode is left out: whether the denoiser has
    a context-parallel plan is known only once it is loaded."""
    modes = ["data", "pipeline"]
    if pipeline in TENSOR_PARALLEL_PIPELINES:
        modes.append("tensor")
    modes = [mode for mode in modes if mode != besides]
    return " or ".join((", ".join(modes[:-1]), modes[-1])) if modes[1:] else modes[0]


def check_mode_fields(options: ParallelismSpec) -> None:
    """ValueError naming each field set outside the modes that read it, even to its default
    value: the entry's author meant something by it that this mode will not do. (A dumped
    spec leaves those fields out, so it reads back: `ParallelismSpec._mode_fields_only`.)"""
    misplaced: list[str] = []
    for field, modes in MODE_FIELDS.items():
        if options.mode not in modes and field in options.model_fields_set:
            takers = " or ".join((", ".join(modes[:-1]), modes[-1])) if modes[1:] else modes[0]
            misplaced.append(f"parallelism.{field}: only {takers} mode takes it")
    if misplaced:
        raise ValueError(
            f"{'; '.join(misplaced)}, not {options.mode} mode; "
            "remove it or set parallelism.mode to a mode that takes it"
        )


class ParallelismSpec(BaseModel):
    """How the model is spread over devices; each group is one routing unit."""

    # Strict, like the registry's sections of numbers: a lax model reads `size: true` as a
    # one-rank group and `size: "2"` as 2, where each is a mistake to name.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    mode: Literal["data", "pipeline", "tensor", "context"] = "data"
    # Devices the model occupies ("cpu", "cuda:0", ...). Data mode uses the worker's own device.
    devices: list[Device] = Field(default_factory=list)
    # Pipeline mode: accelerate device_map strategy and per-device memory caps.
    device_map: Literal["balanced", "auto", "sequential"] = "balanced"
    max_memory: dict[str, str | int] = Field(default_factory=dict)
    offload_folder: str | None = None
    # Tensor mode: ranks in the torch.distributed group and the backend.
    size: int = Field(1, ge=1)
    backend: Literal["torch", "deepspeed"] = "torch"
    # Context mode: the sequence is split over ulysses * ring ranks (diffusers' degrees).
    ulysses: int = Field(1, ge=1)
    ring: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _fields_fit_mode(self) -> ParallelismSpec:
        check_mode_fields(self)
        return self

    @model_validator(mode="after")
    def _context_degrees(self) -> ParallelismSpec:
        check_context_degrees(self.mode, self.ulysses, self.ring, len(self.devices))
        return self

    @model_validator(mode="after")
    def _one_device_per_tensor_rank(self) -> ParallelismSpec:
        if self.mode == "tensor" and self.devices and len(self.devices) != self.size:
            raise ValueError(
                f"parallelism.devices: {len(self.devices)} devices listed, but "
                f"parallelism.size is {self.size}; list one device per rank, or none to run "
                "every rank on the worker's device"
            )
        return self

    @model_serializer(mode="wrap")
    def _mode_fields_only(self, dump: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Fields this mode does not read can only hold their defaults (validation refuses
        # them set); leaving them out lets a dump, as a tensor-parallel helper rank gets
        # its entry, read back without being refused as set outside their mode.
        dumped: dict[str, Any] = dump(self)
        return {k: v for k, v in dumped.items() if self.mode in MODE_FIELDS.get(k, (self.mode,))}

    @field_validator("max_memory", mode="before")
    @classmethod
    def _memory_sizes(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for device, limit in value.items():
                check_memory_device("parallelism.max_memory", device)
                check_memory_size(f"parallelism.max_memory.{device}", limit)
        return value

    @property
    def ranks(self) -> int:
        """Processes in the model's torch.distributed group (1 outside tensor/context)."""
        if self.mode == "context":
            return self.ulysses * self.ring
        return self.size if self.mode == "tensor" else 1
