"""Losing a worker or the scheduler mid-run loses no accepted job."""

from __future__ import annotations

import os
import signal
import time

import grpc
import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.e2e

SLOW_WORKERS = [{"models": ["flux-small"]}, {"models": ["flux-small"]}]


def submit_jobs(stub: gateway_pb2_grpc.GatewayStub, count: int) -> list[str]:
    ids = []
    for seed in range(count):
        request = common_pb2.GenerateRequest(
            model="flux-small", prompt=f"job {seed}", steps=12, width=192, height=192, seed=seed
        )
        ids.append(stub.Submit(request, timeout=30).job_id)
    return ids


def job_state(stub: gateway_pb2_grpc.GatewayStub, job_id: str) -> common_pb2.JobInfo:
    return stub.GetJob(gateway_pb2.GetJobRequest(job_id=job_id), timeout=10)


def final_states(stub: gateway_pb2_grpc.GatewayStub, ids: list[str], timeout: float) -> dict:
    """Watch every job to its end, re-attaching when the mesh drops the stream."""
    states: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    for job_id in ids:
        while job_id not in states and time.monotonic() < deadline:
            try:
                for event in stub.Watch(gateway_pb2.WatchRequest(job_id=job_id), timeout=60):
                    if event.WhichOneof("event") in ("result", "error"):
                        states[job_id] = common_pb2.JobState.Name(event.state)
            except grpc.RpcError:
                time.sleep(0.5)
    return states


def test_worker_sigkill_mid_batch_loses_no_job(launch):
    mesh = launch(SLOW_WORKERS)
    with grpc.insecure_channel(mesh.gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        ids = submit_jobs(stub, 4)

        def someone_running() -> bool:
            return any(job_state(stub, j).step >= 2 for j in ids)

        wait_for(someone_running, timeout=120)
        running = next(job_state(stub, j) for j in ids if job_state(stub, j).step >= 1)
        victim = mesh.child_pid(f"--worker-id {running.worker_id}")
        os.kill(victim, signal.SIGKILL)
        states = final_states(stub, ids, timeout=300)
        assert states == dict.fromkeys(ids, "SUCCEEDED")
        retried = job_state(stub, running.job_id)
        # One more dispatch, elsewhere or to the restarted worker: none to the dead one, which
        # would cost the job a second lost worker out of its max_attempts.
        assert retried.attempts == 2


def test_scheduler_sigkill_recovers_every_job(launch):
    mesh = launch(SLOW_WORKERS)
    with grpc.insecure_channel(mesh.gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        ids = submit_jobs(stub, 4)
        wait_for(lambda: any(job_state(stub, j).step >= 1 for j in ids), timeout=120)
        os.kill(mesh.child_pid(" scheduler "), signal.SIGKILL)
        states = final_states(stub, ids, timeout=300)
        assert states == dict.fromkeys(ids, "SUCCEEDED")
