"""The scheduler's job states and priority classes reach the wire by the proto enums' names."""

from __future__ import annotations

import pytest

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.scheduler.api import convert
from mediamesh.scheduler.core.jobs import JobState, Priority


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
