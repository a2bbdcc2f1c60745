"""A job's webhook notice keeps its delivery id when it is sent again: a job whose end was
announced but not yet stored runs again after a crash and ends anew, and its receiver must
recognise that second `completed` as the same notice (README, Webhooks)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from mediamesh.common.webhook_settings import WebhookSettings
from mediamesh.scheduler.core.delivery import ResultDelivery, WebhookTarget
from mediamesh.scheduler.core.jobs import Job, JobState
from mediamesh.scheduler.core.scheduler import Accepted
from mediamesh.scheduler.store.artifacts import LocalArtifactStore, StoredArtifact
from mediamesh.scheduler.store.deliveries import WebhookDelivery
from mediamesh.scheduler.store.writer import StoreWriter
from mediamesh.scheduler.webhook_delivery import WebhookDeliverer

from .fakes import FakeClock, make_core, new_job

HOOK = WebhookTarget("https://hooks.example.com/h", ("completed", "failed", "progress"))
RESULT = StoredArtifact("jobstore:j/image/png", "image/png", 10, "ab" * 32, 7)


class RecordingWriter:
    """Notes the deliveries saved, in order."""

    def __init__(self) -> None:
        self.saved: list[WebhookDelivery] = []

    def save_delivery(self, delivery: WebhookDelivery) -> None:
        self.saved.append(delivery)


def hooked_job() -> Job:
    outcome = make_core(FakeClock()).prepare(new_job())
    assert isinstance(outcome, Accepted)
    outcome.job.delivery = ResultDelivery(webhook=HOOK)
    return outcome.job


async def announced(job: Job, tmp_path: Path, clock: FakeClock) -> list[WebhookDelivery]:
    """The deliveries one scheduler run makes of the job's two steps and its end."""
    writer = RecordingWriter()
    hooks = WebhookDeliverer(
        WebhookSettings(),
        cast(StoreWriter, writer),
        LocalArtifactStore(tmp_path / "artifacts"),
        clock=clock,
    )
    job.attempts += 1
    hooks.progressed(job, 1, 2)
    hooks.progressed(job, 2, 2)
    job.state = JobState.SUCCEEDED
    hooks.job_ended(job, RESULT)
    await hooks.close()
    first_of_each: dict[str, WebhookDelivery] = {}
    for delivery in writer.saved:
        first_of_each.setdefault(delivery.delivery_id, delivery)
    return list(first_of_each.values())


async def test_a_job_that_ends_again_after_a_crash_repeats_its_completed_delivery_id(
    tmp_path: Path,
) -> None:
    job = hooked_job()
    first = await announced(job, tmp_path, FakeClock(1000.0))
    # The crash: the end was never stored, so the job runs again from QUEUED.
    job.state = JobState.QUEUED
    second = await announced(job, tmp_path, FakeClock(2000.0))

    completed = [d for d in (*first, *second) if d.event == "completed"]
    assert len(completed) == 2
    assert completed[0].delivery_id == completed[1].delivery_id
    assert f'"id":"{completed[0].delivery_id}"' in completed[1].payload
    # Each run's steps are notices of their own (`progress.attempt` tells the runs apart).
    progress_ids = [d.delivery_id for d in (*first, *second) if d.event == "progress"]
    assert len(set(progress_ids)) == 4


async def test_the_failed_notice_has_an_id_of_its_own(tmp_path: Path) -> None:
    job = hooked_job()
    [*_, completed] = await announced(job, tmp_path, FakeClock())
    writer = RecordingWriter()
    hooks = WebhookDeliverer(
        WebhookSettings(), cast(StoreWriter, writer), LocalArtifactStore(tmp_path / "a")
    )
    job.state = JobState.FAILED
    hooks.job_ended(job, None)
    await hooks.close()
    assert writer.saved[0].event == "failed"
    assert writer.saved[0].delivery_id != completed.delivery_id
