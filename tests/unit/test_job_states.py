"""Every view of a job agrees on which of its states are final."""

from __future__ import annotations

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.common.job_states import ENDED_STATE_NAMES
from mediamesh.scheduler.core.jobs import JobState as CoreState
from mediamesh.sdk.types import JobState as SdkState


def test_ended_states_are_states_of_the_wire_enum():
    assert set(common_pb2.JobState.keys()) >= ENDED_STATE_NAMES


def test_the_core_and_the_sdk_end_in_the_same_states():
    assert {state.name for state in CoreState if state.terminal} == ENDED_STATE_NAMES
    assert {state.value for state in SdkState if state.terminal} == ENDED_STATE_NAMES
    assert not (CoreState.RUNNING.terminal or SdkState.QUEUED.terminal)
