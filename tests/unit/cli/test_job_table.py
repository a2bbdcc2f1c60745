"""`mediamesh jobs`'s table, and the commands an interrupted follow prints."""

from __future__ import annotations

from pathlib import Path

from mediamesh.cli.following import still_running
from mediamesh.cli.job_commands import job_table
from mediamesh.sdk import JobInfo, JobState


def job(job_id: str, tenant: str) -> JobInfo:
    return JobInfo(
        job_id=job_id,
        model="echo",
        state=JobState.SUCCEEDED,
        priority=None,
        tenant=tenant,
        created_unix_ms=0,
        finished_unix_ms=0,
        attempts=1,
        step=1,
        total_steps=1,
        seed=1,
        worker_id="w",
        mime_type="image/png",
        size_bytes=10,
    )


def test_the_tenant_column_shows_only_when_the_list_spans_tenants() -> None:
    one = job_table([job("j1", "a"), job("j2", "a")]).splitlines()
    assert one[0].split() == [
        "JOB",
        "MODEL",
        "STATE",
        "STEP",
        "CREATED",
        "(UTC)",
        "RESULT",
        "/",
        "ERROR",
    ]
    several = job_table([job("j1", "a"), job("j2", "b")]).splitlines()
    assert several[0].split()[:3] == ["JOB", "TENANT", "MODEL"]
    assert [row.split()[1] for row in several[1:]] == ["a", "b"]
    assert job_table([]) == "no jobs"


def test_the_printed_commands_reach_the_same_gateway_and_survive_the_shell() -> None:
    text = still_running("j-1", Path("my results/out.png"), "mesh.example:443")
    assert "`mediamesh watch j-1 --gateway mesh.example:443 --out 'my results/out.png'`" in text
    assert "`mediamesh cancel j-1 --gateway mesh.example:443`" in text
    assert "--gateway" not in still_running("j-1", Path("o.png"))
