"""A worker whose tensor-parallel helper rank died exits with a failing status; `mediamesh up`
restarts it and the job it was sent runs on the restarted worker instead of failing."""

from __future__ import annotations

from pathlib import Path

import grpc
import psutil
import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from tests.e2e.conftest import wait_for
from tests.e2e.test_models_and_modes import registry_with_modes

pytestmark = pytest.mark.e2e


def test_a_broken_tensor_group_exits_and_is_restarted(launch, tmp_path: Path) -> None:
    mesh = launch(
        [{"models": ["flux-tiny-tensor"]}], registry_path=str(registry_with_modes(tmp_path))
    )
    worker = psutil.Process(mesh.child_pid("--worker-id worker-0"))
    (helper,) = [c for c in worker.children() if "spawn_main" in " ".join(c.cmdline())]
    helper.kill()
    # Its parent reaps it only when it next looks, so until then it is a zombie.
    wait_for(lambda: not helper.is_running() or helper.status() == psutil.STATUS_ZOMBIE, 10)

    with grpc.insecure_channel(mesh.gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        request = common_pb2.GenerateRequest(
            model="flux-tiny-tensor", prompt="fox", steps=2, seed=3
        )
        job_id = stub.Submit(request, timeout=30).job_id

        worker.wait(120)  # it leaves by itself: nothing signalled it
        wait_for(lambda: any("worker-0 exited (1)" in line for line in mesh.output), 30)

        last = None
        for event in stub.Watch(gateway_pb2.WatchRequest(job_id=job_id), timeout=240):
            last = event
        assert last is not None and last.state == common_pb2.SUCCEEDED, last
        info = stub.GetJob(gateway_pb2.GetJobRequest(job_id=job_id), timeout=10)
        assert info.attempts >= 2, info
