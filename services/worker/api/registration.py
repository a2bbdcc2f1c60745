"""What a worker tells the scheduler about itself when it attaches."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mediamesh.common.generated.v1 import scheduler_pb2
from mediamesh.common.warmup import WARMUP_NONE, WARMUP_WARM, WARMUP_WARMING
from mediamesh.worker.models.adapters import AdapterCache
from mediamesh.worker.models.host import ModelHost


@dataclass(frozen=True)
class DeviceMemory:
    """One device's memory as measured at start-up (zeros when it cannot be measured)."""

    device: str
    total_bytes: int
    free_bytes: int


def worker_registration(
    *,
    worker_id: str,
    address: str,
    pool: str,
    devices: Sequence[DeviceMemory],
    hosts: Mapping[str, ModelHost],
    warming: bool = False,
    residency: Callable[[], Mapping[str, tuple[bool, float]]] | None = None,
) -> scheduler_pb2.WorkerRegistration:
    """The registration message for a worker serving `hosts` at `address`; while `warming`,
    every model is marked so and the scheduler routes none of them here. `residency` says
    which models are loaded now (without it, all of them)."""
    resident = residency() if residency is not None else {}
    return scheduler_pb2.WorkerRegistration(
        worker_id=worker_id,
        address=address,
        pool=pool,
        capacity=1,
        devices=[
            scheduler_pb2.Device(id=d.device, memory_bytes=d.total_bytes, free_bytes=d.free_bytes)
            for d in devices
        ],
        models=[
            scheduler_pb2.HostedModel(
                name=name,
                parallelism=host.spec.parallelism.mode,
                device_ids=host.device_ids,
                adapters=loaded_adapters(getattr(host, "adapters", None)),
                warmup=warmup_state(host, warming),
                resident=resident.get(name, (True, 0.0))[0],
                load_seconds=resident.get(name, (True, 0.0))[1],
            )
            for name, host in hosts.items()
        ],
    )


def loaded_adapters(cache: AdapterCache | None) -> list[scheduler_pb2.LoadedAdapter]:
    """The adapters a host has loaded now, least recently used first."""
    if cache is None:
        return []
    return [scheduler_pb2.LoadedAdapter(name=n, load_seconds=s) for n, s in cache.loaded()]


def model_adapters(
    loaded: Mapping[str, Sequence[tuple[str, float]]],
) -> list[scheduler_pb2.ModelAdapters]:
    """WorkerHeartbeat.adapters for `WorkerRuntime.loaded_adapters()`."""
    return [
        scheduler_pb2.ModelAdapters(
            model=model,
            adapters=[scheduler_pb2.LoadedAdapter(name=n, load_seconds=s) for n, s in adapters],
        )
        for model, adapters in loaded.items()
    ]


def model_residency(
    report: Mapping[str, tuple[bool, float]],
) -> list[scheduler_pb2.HostedModel]:
    """WorkerHeartbeat.residency for `WorkerRuntime.residency_report()`."""
    return [
        scheduler_pb2.HostedModel(name=name, resident=resident, load_seconds=seconds)
        for name, (resident, seconds) in sorted(report.items())
    ]


def warmup_state(host: ModelHost, warming: bool) -> str:
    """HostedModel.warmup of one model."""
    if warming:
        return WARMUP_WARMING
    return WARMUP_WARM if host.spec.warmup else WARMUP_NONE
