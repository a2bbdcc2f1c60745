"""Urgent work pauses a long BATCH video batch at a step boundary, through real processes.

One worker hosts a video model and an image model. A REALTIME image job arriving while a
BATCH video job runs would miss its (short) SLA by waiting for the video to end; instead the
video pauses at its next step, the image runs, and the video resumes on the same worker and
ends with the very bytes of an uninterrupted run.
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2_grpc
from tests.e2e.conftest import wait_for
from tests.e2e.test_spot import Follower

pytestmark = pytest.mark.e2e

VIDEO = {"model": "wan-tiny", "steps": 30, "width": 128, "height": 128, "num_frames": 17}
SCHEDULER = {
    # The video would hold the only worker for far longer than the image queue's SLA.
    "queues": {"image": {"sla_s": 1.0}, "video": {"sla_s": 600.0}},
    "placement": {"BATCH": {"prefer": "on-demand", "allow": ["on-demand"]}},
}


def test_realtime_image_pauses_a_batch_video_which_resumes_unchanged(launch) -> None:
    mesh = launch([{"models": ["wan-tiny", "flux-tiny"]}], scheduler=SCHEDULER)
    with grpc.insecure_channel(mesh.gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        video = common_pb2.GenerateRequest(
            prompt="waves", seed=5, priority=common_pb2.BATCH, **VIDEO
        )
        # Told by the watching thread as step 3 arrives: a poll from here let a fast minute's
        # steps (a few milliseconds each) run on meanwhile, as in the spot tests.
        at_step_3 = threading.Event()
        follower = Follower(stub, stub.Submit(video).job_id, at_step=(3, at_step_3.set))
        assert at_step_3.wait(120)

        started = time.monotonic()
        image = common_pb2.GenerateRequest(
            model="flux-tiny", prompt="now", seed=1, steps=4, priority=common_pb2.REALTIME
        )
        image_events = list(stub.Generate(image, timeout=120))
        image_s = time.monotonic() - started
        assert image_events[-1].HasField("result")
        # It ran while the video was paused, far from the video's end: a step's wait.
        video_step = max(follower.steps())
        assert video_step <= VIDEO["steps"] - 10, (video_step, image_s)

        wait_for(follower.done.is_set, timeout=300)
        assert follower.events[-1].HasField("result")
        notices = follower.notices()
        assert notices.count("paused") == 1 and notices.count("resumed") == 1
        assert sorted(set(follower.steps())) == list(range(1, VIDEO["steps"] + 1))

        # The same video with nothing to pause it: the same bytes.
        again = list(stub.Generate(video, timeout=300))
        assert "paused" not in [e.notice.kind for e in again if e.HasField("notice")]
        assert again[-1].result.data == follower.events[-1].result.data
