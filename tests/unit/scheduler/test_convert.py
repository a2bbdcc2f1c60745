"""The scheduler's job states and priority classes reach the wire by the proto enums' names;
a job's JobInfo carries what it was accepted with."""

from __future__ import annotations

import pytest

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.scheduler.api import convert
from mediamesh.scheduler.core.jobs import GenerationParams, Job, JobState, Priority


@pytest.mark.parametrize("state", list(JobState))
def test_every_job_state_is_sent_as_the_same_wire_state(state: JobState) -> None:
    message = common_pb2.JobInfo(state=convert.state(state))
    assert common_pb2.JobState.Name(message.state) == state.value


@pytest.mark.parametrize("priority", list(Priority))
def test_every_priority_class_is_sent_as_the_same_wire_class(priority: Priority) -> None:
    message = common_pb2.JobInfo(priority=priority.name)
    assert common_pb2.Priority.Name(message.priority) == priority.name


def test_a_name_the_proto_lacks_is_refused() -> None:
    with pytest.raises(ValueError):
        common_pb2.JobInfo(state="LOST")


def test_job_info_carries_the_accepted_parameters() -> None:
    params = GenerationParams(
        prompt="tides", steps=10, seed=3, width=80, height=48, num_frames=9, fps=9, strength=0.5
    )
    job = Job(
        job_id="j1",
        tenant="a",
        model="wan-tiny",
        queue="wan-tiny",
        priority=Priority.STANDARD,
        params=params,
        created_at=1.0,
    )
    # A strength below 1 runs only the tail of the schedule: the run's steps are not the asked.
    job.total_steps = 5
    info = convert.job_info(job, None)
    asked = (info.prompt, info.steps, info.width, info.height, info.num_frames, info.fps)
    assert asked == ("tides", 10, 80, 48, 9, 9)
    assert info.total_steps == 5 and info.seed == 3
