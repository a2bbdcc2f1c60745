"""A batch whose worker connection breaks mid-stream gives the worker up at once: its jobs go
to the front of the line counting one lost worker, and the worker must register again before
it gets work, instead of being handed the jobs straight back (a second batch its death would
cost them, one more lost worker out of their max_attempts)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.common.work import JobParams, WorkerEvent
from mediamesh.scheduler.batches import WorkerGone, WorkerLink
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.mesh.link_wrappers import ForwardingLink
from tests.service.mesh.test_unreachable_worker import result_state, until


class BreaksOnce(ForwardingLink):
    """The real link, whose first batch loses its connection after its first events, as
    when the worker is killed mid-batch while its registration still stands."""

    def __init__(self, link: WorkerLink) -> None:
        super().__init__(link)
        self.broken: list[str] = []

    async def run_batch(
        self, address: str, batch_id: str, model: str, jobs: list[JobParams], **options: str
    ) -> AsyncIterator[list[WorkerEvent]]:
        async for events in self._link.run_batch(address, batch_id, model, jobs, **options):
            yield events
            if not self.broken:
                self.broken.append(batch_id)
                raise WorkerGone("UNAVAILABLE: Socket closed")


async def test_a_broken_batch_stream_drops_the_worker_and_counts_one_loss(
    tmp_path, models_dir, caplog
):
    caplog.set_level(logging.INFO, logger="mediamesh.scheduler")
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        batches = mesh.scheduler.runtime.batches
        link = batches.link = BreaksOnce(batches.link)
        (worker_id,) = mesh.core.units
        registration = mesh.core.units[worker_id].info
        stub = mesh.gateway_stub()
        request = common_pb2.GenerateRequest(model="echo", prompt="x", steps=4)
        job_id = (await stub.Submit(request, timeout=10)).job_id
        assert await result_state(mesh, job_id) == "SUCCEEDED"
        job = mesh.core.jobs[job_id]
        assert link.broken and (job.attempts, job.worker_losses) == (2, 1)
        # Its second run waited for the worker to register again.
        await until(lambda: worker_id in mesh.core.units)
        assert mesh.core.units[worker_id].info is not registration
        # The requeue's log line names where the job was lost, not where it went next.
        (requeued,) = [
            r.fields  # type: ignore[attr-defined]
            for r in caplog.records
            if getattr(r, "fields", {}).get("reason", "").startswith(f"worker {worker_id} lost")
        ]
        assert (requeued["worker"], requeued["batch"]) == (worker_id, link.broken[0])
    finally:
        await stop_mesh(mesh)
