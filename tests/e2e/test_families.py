"""Every tiny diffusers family through `mediamesh up`: steps, cancel, seeds, preemption.

One mesh per family with two workers hosting it: the first is spot capacity, which is
SIGTERMed mid-job; the job then resumes on the second (every family here resumes; the
restart path is covered with a scheduler that cannot, in tests/service/worker_models).
Tolerance for a seed alone and in a batch: images at most 2 levels of 8 bits anywhere and
under 0.1 on average; audio (16-bit WAV) at most 4 levels of 16 bits anywhere and under 0.1
on average (batched matmuls round differently; the noise is the same). Video is compared
after decoding by PSNR (`tests.media.VIDEO_PSNR_DB`, which says why).
"""

from __future__ import annotations

import io
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
import pytest
import soundfile
import yaml
from PIL import Image

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from mediamesh.common.registry import DEFAULT_REGISTRY
from tests.e2e.test_spot import PLACEMENT, EventLog, Follower, frames_of
from tests.media import VIDEO_PSNR_DB, psnr_db

pytestmark = pytest.mark.e2e

# Family -> whether a preempted job resumes (True) or restarts from step 0 (False).
FAMILIES = {
    "sdxl-tiny": True,
    "sd3-tiny": True,
    "pixart-tiny": True,
    "cogvideox-tiny": True,
    # The legacy `callback` hook; DDIM resumes by timestep.
    "audioldm2-tiny": True,
}
# Largest and mean absolute difference allowed between a seed alone and in a batch, in
# levels of the result's sample type (8-bit pixels, 16-bit PCM samples).
TOLERANCE = {"image": (2, 0.1), "audio": (4, 0.1)}
# Enough steps that a cancel sent after the first progress event lands mid-run.
STEPS = 40
ALL_STEPS = list(range(1, STEPS + 1))


class Generating(EventLog):
    """A Generate stream in the background, keeping every event; `at_step=(n, action)` calls
    `action(job_id)` on the stream's thread once progress reaches step n."""

    def __init__(
        self,
        stub: gateway_pb2_grpc.GatewayStub,
        model: str,
        seed: int,
        at_step: tuple[int, Callable[[str], object]] | None = None,
    ) -> None:
        super().__init__()
        request = common_pb2.GenerateRequest(model=model, prompt="a cat", seed=seed, steps=STEPS)

        def run() -> None:
            pending = [at_step] if at_step else []
            try:
                for event in stub.Generate(request, timeout=240):
                    self.events.append(event)
                    if pending and event.progress.step >= pending[0][0]:
                        pending.pop()[1](event.job_id)
            finally:
                self.done.set()

        threading.Thread(target=run, daemon=True).start()


def samples(result: common_pb2.GenerateEvent, folder: Path, name: str) -> np.ndarray:
    """The result decoded: pixels (frames) as 8-bit levels, audio as 16-bit levels."""
    if result.mime_type.startswith("audio/"):
        audio, _rate = soundfile.read(io.BytesIO(result.data), dtype="int16")
        return np.asarray(audio, dtype=np.int32)
    if result.mime_type.startswith("video/"):
        return frames_of(result.data, folder, name).astype(np.int16)
    return np.asarray(Image.open(io.BytesIO(result.data)).convert("RGB"), dtype=np.int16)


def registry_batching_three(tmp_path: Path, model: str) -> Path:
    """The shipped registry with `model` batching three jobs over a window long enough that
    three submissions in a row always meet, however loaded the machine."""
    entries = yaml.safe_load(DEFAULT_REGISTRY.read_text())["models"]
    entry = next(e for e in entries if e["name"] == model)
    entry["batching"] = {"mode": "dynamic", "max_batch": 3, "max_wait_ms": 3000}
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [entry]}))
    return path


@pytest.mark.parametrize("model", list(FAMILIES))
def test_family_steps_cancel_seeds_and_preemption(launch, tmp_path: Path, model: str) -> None:
    mesh = launch(
        [{"models": [model], "pool": "spot"}, {"models": [model], "pool": "on-demand"}],
        extra_args=("--no-restart",),
        scheduler=PLACEMENT,
        registry_path=str(registry_batching_three(tmp_path, model)),
    )
    options = [("grpc.max_receive_message_length", 1 << 26)]
    with grpc.insecure_channel(mesh.gateway, options=options) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        listed = {m.name: m for m in stub.ListModels(gateway_pb2.ListModelsRequest()).models}
        assert "negative_prompt" in listed[model].accepted_fields

        # Progress on every step, alone.
        events = list(
            stub.Generate(
                common_pb2.GenerateRequest(model=model, prompt="a cat", seed=5, steps=STEPS),
                timeout=300,
            )
        )
        assert events[-1].state == common_pb2.SUCCEEDED, events[-1]
        assert [e.progress.step for e in events if e.HasField("progress")] == ALL_STEPS
        alone = events[-1].result

        # Three jobs submitted together; one is cancelled once it has made progress. Each is
        # a Generate stream, which sees every event from the start: a Watch opened after
        # Submit could attach after step 1 on a loaded machine.
        cancel_first = (1, lambda job_id: stub.Cancel(gateway_pb2.CancelRequest(job_id=job_id)))
        followers = [Generating(stub, model, seed=4, at_step=cancel_first)]
        followers += [Generating(stub, model, seed=seed) for seed in (5, 6)]
        for follower in followers:
            assert follower.done.wait(240)
        ids = [follower.events[0].job_id for follower in followers]
        # One pipeline call: the cancel hit a running batch, and seed 5 ran among others.
        batches = {stub.GetJob(gateway_pb2.GetJobRequest(job_id=i)).batch_id for i in ids}
        assert len(batches) == 1 and "" not in batches, batches
        assert followers[0].events[-1].state == common_pb2.CANCELLED
        for follower in followers[1:]:
            assert follower.events[-1].state == common_pb2.SUCCEEDED
            assert follower.steps() == ALL_STEPS
        difference = np.abs(
            samples(alone, tmp_path, "alone")
            - samples(followers[1].events[-1].result, tmp_path, "batched")
        )
        modality = listed[model].modality
        if modality == "video":
            assert psnr_db(difference) >= VIDEO_PSNR_DB, difference.max()
        else:
            largest, mean = TOLERANCE[modality]
            assert difference.max() <= largest and difference.mean() < mean

        # Preemption: the spot worker is told to stop while the job runs.
        long_job = common_pb2.GenerateRequest(
            model=model, prompt="a dog", seed=7, steps=50, priority=common_pb2.BATCH
        )
        spot_worker = mesh.child_pid("--worker-id worker-0")
        job_id = stub.Submit(long_job).job_id
        follower = Follower(stub, job_id, at_step=(3, lambda: os.kill(spot_worker, signal.SIGTERM)))
        assert follower.done.wait(240)
        assert stub.GetJob(gateway_pb2.GetJobRequest(job_id=job_id)).worker_id == "worker-1"
        assert follower.events[-1].state == common_pb2.SUCCEEDED, follower.events[-1]
        assert "preempted" in follower.notices()
        steps = follower.steps()
        if FAMILIES[model]:
            assert "resumed" in follower.notices()
            assert steps.count(1) == 1, f"progress restarted from step 1: {steps}"
        else:
            assert "restarted" in follower.notices()
            assert steps.count(1) == 2, steps
        assert steps[-1] == 50
