"""A tenant's quota of stored result bytes: a tenant holding it is refused new jobs, naming
what it holds and the quota, until it deletes results; other tenants, retries under an
idempotency key and a restarted scheduler's count are unaffected; `mediamesh batch` stops
at the quota, and runs within it when it deletes each result it has saved."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, scheduler_pb2, scheduler_pb2_grpc
from mediamesh.scheduler.store.job_store import JobStore
from tests.conftest import ROOT
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, KEY_B, NO_SPOT_WAIT, auth, keyed


def refusals() -> float:
    return (
        REGISTRY.get_sample_value(
            "mediamesh_jobs_refused_total", {"queue": "image", "reason": "result_quota"}
        )
        or 0.0
    )


@pytest.fixture
async def quota_mesh(tmp_path: Path, models_dir: Path) -> AsyncIterator[InProcessMesh]:
    """Tenant a may hold one byte of results (one result puts it over); tenant b has no
    quota. No ended job stays in memory, so retries are answered from the store."""
    mesh = await start_mesh(
        tmp_path,
        models_dir,
        [["echo"]],
        gateway=keyed(a={"result_quota_bytes": 1}),
        # The batch command's jobs are BATCH, which would wait for a spot worker first.
        scheduler={"ended_jobs_in_memory": 0, **NO_SPOT_WAIT},
    )
    yield mesh
    await stop_mesh(mesh)


def result_bytes(event: common_pb2.GenerateEvent) -> int:
    """The size of the event's result: echo's are small enough to come inline."""
    return len(event.result.data) or event.result.artifact.size_bytes


async def run_to_end(stub, key: str, **fields) -> common_pb2.GenerateEvent:
    request = common_pb2.GenerateRequest(model="echo", prompt="x", **fields)
    events = [e async for e in stub.Generate(request, metadata=auth(key))]
    return events[-1]


async def test_a_tenant_holding_its_quota_is_refused_until_it_deletes(quota_mesh):
    stub = quota_mesh.gateway_stub()
    first = await run_to_end(stub, KEY_A, idempotency_key="first")
    assert first.state == common_pb2.SUCCEEDED
    held = quota_mesh.scheduler.runtime.result_usage.held("a")
    assert held == result_bytes(first) > 0
    before = refusals()

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Submit(
            common_pb2.GenerateRequest(model="echo", prompt="y"), metadata=auth(KEY_A)
        )

    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = caught.value.details() or ""
    assert details.startswith("result_quota_bytes:")
    assert f"holds {held} bytes" in details and "quota of 1" in details
    assert refusals() == before + 1
    # A retry of the job that made the quota full is still answered with it, from the store.
    again = await stub.Submit(
        common_pb2.GenerateRequest(model="echo", prompt="x", idempotency_key="first"),
        metadata=auth(KEY_A),
    )
    assert (again.job_id, again.deduplicated) == (first.job_id, True)
    # Another tenant's results are its own.
    assert (await run_to_end(stub, KEY_B)).state == common_pb2.SUCCEEDED

    await stub.DeleteJob(gateway_pb2.DeleteJobRequest(job_id=first.job_id), metadata=auth(KEY_A))

    assert quota_mesh.scheduler.runtime.result_usage.held("a") == 0
    assert (await run_to_end(stub, KEY_A)).state == common_pb2.SUCCEEDED


async def test_a_restarted_scheduler_counts_what_each_tenant_holds(
    tmp_path: Path, models_dir: Path
):
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]], gateway=keyed())
    try:
        stub = mesh.gateway_stub()
        sizes = {
            "a": [result_bytes(await run_to_end(stub, KEY_A)) for _ in range(2)],
            "b": [result_bytes(await run_to_end(stub, KEY_B))],
        }
        await mesh.scheduler.runtime.writer.flush(5.0)
    finally:
        await stop_mesh(mesh)
    store = JobStore(tmp_path / "jobs.sqlite3")
    try:
        assert await store.result_bytes_by_tenant() == {t: sum(s) for t, s in sizes.items()}
    finally:
        await store.close()
    restarted = await start_mesh(tmp_path, models_dir, [], gateway=keyed())
    try:
        usage = restarted.scheduler.runtime.result_usage
        assert (usage.held("a"), usage.held("b")) == (sum(sizes["a"]), sum(sizes["b"]))
        # What `mediamesh status` shows an operator.
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{restarted.scheduler.port}")
        restarted.channels.append(channel)
        status = await scheduler_pb2_grpc.SchedulerStub(channel).GetStatus(
            scheduler_pb2.GetStatusRequest()
        )
        assert dict(status.result_bytes_by_tenant) == {t: sum(s) for t, s in sizes.items()}
    finally:
        await stop_mesh(restarted)


async def batch_run(prompts: Path, out: Path, gateway: str, *flags: str) -> tuple[int, str]:
    """`mediamesh batch` as tenant a, one line at a time; its exit code and output."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mediamesh.cli.main", "batch", str(prompts), "--out", str(out),
        "--model", "echo", "--gateway", gateway, "--api-key", KEY_A, "--concurrency", "1",
        "--quiet", *flags,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, output.decode()


async def test_a_batch_that_deletes_its_results_runs_within_the_quota(
    quota_mesh: InProcessMesh, tmp_path: Path
):
    gateway = f"127.0.0.1:{quota_mesh.gateway.port}"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(3)))

    code, output = await batch_run(prompts, tmp_path / "kept", gateway)
    assert code == 2 and "result_quota_bytes: tenant 'a' holds" in output
    assert sorted(p.name for p in (tmp_path / "kept").glob("*.png")) == ["1.png"]

    # The first run's result still fills the quota: delete it, as the message says.
    manifest = (tmp_path / "kept" / "manifest.jsonl").read_text()
    (row,) = [json.loads(text) for text in manifest.splitlines()]
    stub = quota_mesh.gateway_stub()
    await stub.DeleteJob(gateway_pb2.DeleteJobRequest(job_id=row["job_id"]), metadata=auth(KEY_A))

    code, output = await batch_run(prompts, tmp_path / "deleted", gateway, "--delete-results")
    assert code == 0, output
    assert "3 succeeded, 0 failed, 0 already done; 3 deleted from the mesh" in output
    assert len(list((tmp_path / "deleted").glob("*.png"))) == 3
    assert quota_mesh.scheduler.runtime.result_usage.held("a") == 0
