"""Spot capacity without lost work: preemption with checkpoints resumed elsewhere."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
import pytest
from imageio_ffmpeg import read_frames

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

pytestmark = pytest.mark.e2e

VIDEO = {"model": "wan-tiny", "steps": 24, "width": 128, "height": 128, "num_frames": 17}
PLACEMENT = {
    "placement": {
        "BATCH": {"prefer": "spot", "allow": ["spot", "on-demand"], "fallback_after_s": 2.0}
    }
}


def frames_of(data: bytes, folder: Path, name: str) -> np.ndarray:
    path = folder / f"{name}.mp4"
    path.write_bytes(data)
    reader = read_frames(str(path))
    meta = next(reader)
    width, height = meta["size"]
    return np.stack([np.frombuffer(f, np.uint8).reshape(height, width, 3) for f in reader])


class EventLog:
    """A job's events as a background thread records them."""

    def __init__(self) -> None:
        self.events: list[common_pb2.GenerateEvent] = []
        self.done = threading.Event()

    def steps(self) -> list[int]:
        return [e.progress.step for e in self.events if e.HasField("progress")]

    def notices(self) -> list[str]:
        return [e.notice.kind for e in self.events if e.HasField("notice")]


class Follower(EventLog):
    """Watches a job in the background, keeping every event."""

    def __init__(
        self,
        stub: gateway_pb2_grpc.GatewayStub,
        job_id: str,
        at_step: tuple[int, Callable[[], object]] | None = None,
    ) -> None:
        """`at_step=(n, action)` runs `action` once, on the watching thread, as soon as
        progress reaches step n: the tiny models run a step in milliseconds, so a test that
        polled for the step would often act after the job had finished."""
        super().__init__()
        pending = [at_step] if at_step else []

        def run() -> None:
            while not self.done.is_set():
                try:
                    for event in stub.Watch(gateway_pb2.WatchRequest(job_id=job_id), timeout=120):
                        self.events.append(event)
                        if pending and event.progress.step >= pending[0][0]:
                            pending.pop()[1]()
                        if event.WhichOneof("event") in ("result", "error"):
                            self.done.set()
                except grpc.RpcError:
                    time.sleep(0.3)
                except ValueError:  # the test closed the channel
                    return

        threading.Thread(target=run, daemon=True).start()


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_spot_worker_sigterm_checkpoints_and_the_job_resumes_on_demand(launch, tmp_path):
    mesh = launch(
        [{"models": ["wan-tiny"], "pool": "spot"}, {"models": ["wan-tiny"], "pool": "on-demand"}],
        extra_args=("--no-restart",),
        scheduler=PLACEMENT,
    )
    with grpc.insecure_channel(mesh.gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        batch = [
            stub.Submit(
                common_pb2.GenerateRequest(
                    prompt=f"clip {seed}", seed=seed, priority=common_pb2.BATCH, **VIDEO
                )
            ).job_id
            for seed in (1, 2)
        ]
        spot_worker = mesh.child_pid("--worker-id worker-0")
        # From the watching thread as step 3 arrives: polling for a step from here let the
        # batch's last steps run (in a fast minute, all 24 in a fifth of a second) before the
        # SIGTERM, and a batch past its last step finishes rather than stopping.
        followers = [
            Follower(stub, batch[0], at_step=(3, lambda: os.kill(spot_worker, signal.SIGTERM))),
            Follower(stub, batch[1]),
        ]
        for follower in followers:
            assert follower.done.wait(240)
        first_run = next(e.notice for e in followers[0].events if e.notice.kind == "dispatched")
        assert first_run.worker_id == "worker-0"

        for follower in followers:
            final = follower.events[-1]
            assert final.state == common_pb2.SUCCEEDED, final
            steps = follower.steps()
            assert "preempted" in follower.notices() and "resumed" in follower.notices()
            assert "spot_fallback" in follower.notices()
            assert steps.count(1) == 1, f"progress restarted from step 1: {steps}"
            assert steps[-1] == 24 and sorted(set(steps)) == list(range(1, 25))

        # The same batch without interruption, on the on-demand worker. A blocker keeps the
        # worker busy so both reference jobs queue and form one batch, in the same order.
        other_key = {**VIDEO, "steps": 23}  # never batched with the reference jobs
        blocker = stub.Submit(common_pb2.GenerateRequest(prompt="blocker", seed=9, **other_key))
        reference = [
            stub.Submit(
                common_pb2.GenerateRequest(prompt=f"clip {seed}", seed=seed, **VIDEO)
            ).job_id
            for seed in (1, 2)
        ]
        reference_followers = [Follower(stub, job_id) for job_id in [blocker.job_id, *reference]]
        for follower in reference_followers:
            assert follower.done.wait(240)
        for resumed, uninterrupted in zip(followers, reference_followers[1:], strict=True):
            assert uninterrupted.events[-1].state == common_pb2.SUCCEEDED
            assert resumed.events[-1].result.data == uninterrupted.events[-1].result.data
        frames = frames_of(followers[0].events[-1].result.data, tmp_path, "resumed")
        assert frames.shape == (17, 128, 128, 3)

    scheduler_metrics = mesh.config["scheduler"]["metrics_port"]
    assert metric(scheduler_metrics, "mediamesh_spot_fallbacks_total") >= 2
    assert metric(scheduler_metrics, "mediamesh_preemptions_total") >= 2
    status = mesh.cli("status", "--config", str(mesh.config_path))
    assert "COST" in status.stdout and "if all on-demand" in status.stdout
    checkpoints = Path(mesh.config["workers"][0]["checkpoint_dir"])
    assert not list(checkpoints.glob("*.pt")), "checkpoints must be deleted when their job ends"


def test_sigkill_with_periodic_checkpoints_redoes_at_most_one_interval(launch):
    mesh = launch(
        [{"models": ["wan-tiny"]}, {"models": ["wan-tiny"]}],
        extra_args=("--no-restart",),
        scheduler={"checkpoint_every_steps": {"video": 4}},
    )
    with grpc.insecure_channel(mesh.gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        job_id = stub.Submit(common_pb2.GenerateRequest(prompt="clip", seed=3, **VIDEO)).job_id
        killed_after: list[int] = []

        def kill_its_worker() -> None:
            # On the watching thread as step 10 arrives (see the SIGTERM test for why).
            worker = stub.GetJob(gateway_pb2.GetJobRequest(job_id=job_id)).worker_id
            os.kill(mesh.child_pid(f"--worker-id {worker}"), signal.SIGKILL)
            killed_after.append(max(follower.steps()))

        follower = Follower(stub, job_id, at_step=(10, kill_its_worker))
        assert follower.done.wait(240)
    assert follower.events[-1].state == common_pb2.SUCCEEDED
    assert "requeued" in follower.notices(), "the worker was killed after the job had ended"
    (killed_after,) = killed_after
    steps = follower.steps()
    # Each step is reported once, except the ones redone after the kill: those come twice.
    redone = len(steps) - 24
    assert max(steps) == 24 and sorted(set(steps)) == list(range(1, 25))
    assert steps.count(1) == 1, f"the job restarted from step 0 instead of its checkpoint: {steps}"
    assert killed_after >= 10
    assert 0 <= redone <= 4, f"redid {redone} steps: {steps}"
