"""Small synchronous clients the CLI uses to look at a running mesh."""

from __future__ import annotations

import grpc

from mediamesh.common.credentials import InternalCredentials
from mediamesh.common.generated.v1 import (
    scheduler_pb2,
    scheduler_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)
from mediamesh.common.interceptors import INTERNAL_TOKEN_KEY
from mediamesh.common.settings import MeshConfig

# Hosts that mean "listen on every address".
_EVERY_ADDRESS = frozenset({"0.0.0.0", "::", ""})


def _metadata(credentials: InternalCredentials) -> list[tuple[str, str]]:
    return [(INTERNAL_TOKEN_KEY, credentials.token)] if credentials.token else []


def scheduler_address(config: MeshConfig) -> str:
    """Where the config's scheduler is reached: where it listens, unless that is every
    address (a container's 0.0.0.0), which names no host to dial; then where the gateway
    reaches it (a service name such as mediamesh-scheduler:50052)."""
    s = config.scheduler
    if s.host.strip("[]") in _EVERY_ADDRESS:
        return config.gateway.scheduler_address
    return f"{s.host}:{s.port}"


def mesh_status(config: MeshConfig, address: str | None = None) -> scheduler_pb2.MeshStatus:
    """The scheduler's MeshStatus (queues, workers), asked at `address` or the configured one.

    Raises grpc.RpcError when the scheduler cannot be reached within 5 seconds.
    """
    credentials = InternalCredentials.from_config(config)
    with credentials.blocking_channel(address or scheduler_address(config)) as channel:
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        return stub.GetStatus(
            scheduler_pb2.GetStatusRequest(), timeout=5, metadata=_metadata(credentials)
        )


def drain_worker(config: MeshConfig, address: str, grace_s: float, exit_after: bool) -> list[str]:
    """Asks the worker at `address` to drain; the ids of the jobs it is checkpointing."""
    credentials = InternalCredentials.from_config(config)
    with credentials.blocking_channel(address) as channel:
        reply = worker_pb2_grpc.WorkerStub(channel).Drain(
            worker_pb2.DrainRequest(grace_s=grace_s, exit=exit_after),
            metadata=_metadata(credentials),
            # The answer comes after the grace period when the worker waits for its jobs.
            timeout=max(grace_s, 1.0) + 10,
        )
    return list(reply.preempted)


def registered_workers(config: MeshConfig) -> set[str]:
    """Ids of the workers the configured scheduler knows; empty when it is unreachable."""
    try:
        status = mesh_status(config)
    except grpc.RpcError:
        return set()
    return {w.worker_id for w in status.workers}
