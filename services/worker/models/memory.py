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
    """(total_bytes, free_bytes) of a device: CUDA from the driver, CPU from `host_memory`."""
    target = torch.device(device)
    if target.type == "cuda":
        free, total = torch.cuda.mem_get_info(target)
        return int(total), int(free)
    return host_memory()


def host_memory(
    proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")
) -> tuple[int, int]:
    """(total_bytes, free_bytes) this process may use: its memory cgroup's limit when it has
    one (a container, a k8s pod), else the host's, from /proc/meminfo.

    Inside a memory-limited container /proc/meminfo is still the node's: the worker reported
    the node's RAM as its device memory, and `check_fits` judged a model against memory the
    cgroup's OOM killer would not let it have.
    """
    total, free = _meminfo(proc / "meminfo")
    limits = _cgroup_limits(proc / "self" / "cgroup", cgroup_root, total)
    if not limits:
        return total, free
    # The tightest of the cgroup and its ancestors; never more than the host has.
    return min(total, *(limit for limit, _ in limits)), min(free, *(room for _, room in limits))


def _meminfo(path: Path) -> tuple[int, int]:
    fields: dict[str, int] = {}
    for line in path.read_text().splitlines():
        name, _, rest = line.partition(":")
        if rest.split():
            fields[name] = int(rest.split()[0]) * 1024
    return fields["MemTotal"], fields.get("MemAvailable", fields["MemFree"])


def _cgroup_limits(self_cgroup: Path, root: Path, host_total: int) -> list[tuple[int, int]]:
    """(limit, bytes left under it) of each memory-limited cgroup from this process's own up
    to the root of the mount; empty when none limits memory or none can be read."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return []
    entries = [line.split(":", 2) for line in lines if line.count(":") >= 2]
    v1 = [entry for entry in entries if "memory" in entry[1].split(",")]
    v2 = [entry for entry in entries if entry[0] == "0" and not entry[1]]
    if v1:
        # cgroup v1 (or hybrid: memory is still a v1 controller beside the unified tree).
        base, names = root / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        inactive, relative = "total_inactive_file", v1[0][2]
    elif v2 and (root / "cgroup.controllers").is_file():
        base, names = root, ("memory.max", "memory.current")
        inactive, relative = "inactive_file", v2[0][2]
    else:
        return []
    own = base / relative.strip("/")
    # A container with its own cgroup namespace, or with its cgroup mounted at the root,
    # names a path the mount does not have: the root of the mount is its cgroup then.
    folder = own if own.is_dir() else base
    found = []
    while True:
        limit = _read_bytes(folder / names[0])
        # v1 writes "no limit" as a huge number rather than "max".
        if limit is not None and limit < host_total:
            usage = _read_bytes(folder / names[1])
            if usage is not None:
                # Inactive page cache (the weight files read at load) is reclaimed before
                # the OOM killer acts: the working set is what counts, as the kubelet's.
                working = max(0, usage - _stat(folder / "memory.stat", inactive))
                found.append((limit, max(0, limit - working)))
        if folder == base or base not in folder.parents:
            return found
        folder = folder.parent


def _read_bytes(path: Path) -> int | None:
    """An integer file of cgroupfs; None when absent, unreadable or "max" (no limit)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _stat(path: Path, name: str) -> int:
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


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
