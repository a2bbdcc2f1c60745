"""A job paused at a step boundary reads as paused on every face: the HTTP job, the SDK's
JobInfo, `mediamesh jobs` and the queue table of `mediamesh status`."""

from __future__ import annotations

from mediamesh.cli.job_commands import job_table
from mediamesh.cli.status_table import render
from mediamesh.common.generated.v1 import common_pb2, scheduler_pb2
from mediamesh.gateway.api.json_plane import job_view
from mediamesh.gateway.http.schemas import JobView
from mediamesh.sdk.api import convert


def paused_info() -> common_pb2.JobInfo:
    return common_pb2.JobInfo(
        job_id="j1",
        model="flux-tiny",
        state=common_pb2.RUNNING,
        tenant="t",
        step=3,
        total_steps=50,
        paused=True,
    )


def test_the_http_job_says_it_is_paused() -> None:
    links = {"self": "/v1/jobs/j1", "events": "/v1/jobs/j1/events", "result": "/r"}
    view = JobView.model_validate({**job_view(paused_info()), "links": links})
    assert view.state == "RUNNING" and view.paused is True
    running = common_pb2.JobInfo(job_id="j2", state=common_pb2.RUNNING)
    assert JobView.model_validate({**job_view(running), "links": links}).paused is False


def test_the_sdk_and_the_jobs_table_say_it_is_paused() -> None:
    info = convert.job_info(paused_info())
    assert info.paused
    row = job_table([info]).splitlines()[1]
    assert "RUNNING (paused)" in row
    info = convert.job_info(common_pb2.JobInfo(job_id="j2", state=common_pb2.RUNNING))
    assert not info.paused
    assert "(paused)" not in job_table([info])


def test_the_status_queue_table_counts_paused_jobs_apart() -> None:
    status = scheduler_pb2.MeshStatus(
        queues=[scheduler_pb2.QueueStatus(name="video", running=1, paused=2)]
    )
    header, row = render(status).splitlines()[1:3]
    assert header.split()[-2:] == ["running", "paused"]
    assert row.split()[-2:] == ["1", "2"]
