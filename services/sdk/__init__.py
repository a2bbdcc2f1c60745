"""The mediamesh Python SDK: Client (blocking) and AsyncClient (asyncio) for the gateway.

    from mediamesh import Client
    with Client("127.0.0.1:50051") as client:
        for event in client.generate("flux-tiny", "a red fox", steps=4):
            ...

generate and watch yield typed events (Queued, Progress, Notice, then Result or Error);
they re-attach to an accepted job when its stream breaks off with the connection, and
stopping early does not cancel the job (cancel(job_id) does). Failed calls raise
GatewayError with the gRPC status code name, the server's retry hint, the refused `field`,
for a job's stream its `job_id`, and for a submit or generate that failed before a job id
came the `idempotency_key` that gets the job, if one was made. An AsyncClient belongs to
the event loop it was created in; anything else raises EventLoopError. An option value the
request cannot carry raises ValueError (out of its range) or TypeError (not of its type)
naming the option, before anything is sent.
"""

from mediamesh.sdk.async_client import AsyncClient
from mediamesh.sdk.client import Client
from mediamesh.sdk.errors import EventLoopError, GatewayError
from mediamesh.sdk.events import Error, Event, Notice, Progress, Queued, Result
from mediamesh.sdk.options import GenerateOptions
from mediamesh.sdk.types import (
    AdapterInfo,
    Artifact,
    DeletedJob,
    JobHandle,
    JobInfo,
    JobPage,
    JobState,
    ModelInfo,
    ModelLimits,
    Priority,
    UploadHandle,
)

__all__ = [
    "AdapterInfo",
    "Artifact",
    "AsyncClient",
    "Client",
    "DeletedJob",
    "Error",
    "Event",
    "EventLoopError",
    "GatewayError",
    "GenerateOptions",
    "JobHandle",
    "JobInfo",
    "JobPage",
    "JobState",
    "ModelInfo",
    "ModelLimits",
    "Notice",
    "Priority",
    "Progress",
    "Queued",
    "Result",
    "UploadHandle",
]
