"""`mediamesh_jobs_total` balances across a restart: the jobs a restarted scheduler takes
back from its store count as RECOVERED, so ACCEPTED + RECOVERED - the ended states is what
the scheduler holds, never below zero (it went negative with ACCEPTED alone)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from mediamesh.scheduler.core.jobs import JobState
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.mesh.test_job_trace_logs import TRACES, submit_under
from tests.service.mesh.test_store_durability import until

ENDED = [state.value for state in JobState if state.terminal]


def jobs_total(state: str) -> float:
    # Every queue: the counter is the process's, shared by the meshes of earlier tests.
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        if metric.name == "mediamesh_jobs"
        for sample in metric.samples
        if sample.name == "mediamesh_jobs_total" and sample.labels["state"] == state
    )


def held() -> float:
    """What the counter says the scheduler holds: taken on minus ended."""
    return jobs_total("ACCEPTED") + jobs_total("RECOVERED") - sum(map(jobs_total, ENDED))


async def test_jobs_taken_back_after_a_restart_count_as_recovered_not_accepted(
    tmp_path: Path, models_dir: Path
) -> None:
    # No worker: the jobs are still queued when the scheduler stops.
    mesh = await start_mesh(tmp_path, models_dir, [])
    try:
        job_ids = [await submit_under(mesh, t, name) for name, t in TRACES.items()]
    finally:
        await stop_mesh(mesh)
    accepted, recovered, before = jobs_total("ACCEPTED"), jobs_total("RECOVERED"), held()
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        await until(lambda: all(mesh.core.jobs[j].state is JobState.SUCCEEDED for j in job_ids))
    finally:
        await stop_mesh(mesh)
    assert jobs_total("RECOVERED") - recovered == len(job_ids)
    assert jobs_total("ACCEPTED") == accepted
    # The second scheduler took on two jobs and ended both.
    assert held() - before == 0
