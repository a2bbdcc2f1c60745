"""What a worker tells the scheduler about itself when it attaches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mediamesh.common.generated.v1 import scheduler_pb2
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
) -> scheduler_pb2.WorkerRegistration:
    """The registration message for a worker serving `hosts` at `address`."""
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
                name=name, parallelism=host.spec.parallelism.mode, device_ids=host.device_ids
            )
            for name, host in hosts.items()
        ],
    )
