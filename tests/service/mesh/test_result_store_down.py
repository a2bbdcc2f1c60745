"""A result the artifact backend cannot take (an unreachable bucket, a full disk) is not
lost: it is kept in the job store. And should no store keep it, only its own job fails,
UNAVAILABLE, while the rest of its batch is heard as before."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.scheduler.store.in_store_results import IN_STORE_PREFIX
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh


def counted(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


async def generate(mesh: InProcessMesh, prompt: str) -> common_pb2.GenerateEvent:
    request = common_pb2.GenerateRequest(model="echo", prompt=prompt)
    events = [e async for e in mesh.gateway_stub().Generate(request, timeout=60)]
    return events[-1]


async def test_a_result_the_backend_refuses_is_kept_in_the_job_store(
    tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every result goes to the backend (in_store_max_bytes 0), whose writes fail.
    mesh = await start_mesh(
        tmp_path, models_dir, [["echo"]], scheduler={"artifacts": {"in_store_max_bytes": 0}}
    )
    try:
        backend = mesh.scheduler.runtime.artifacts.backend.backend

        async def refuse(*_args: Any) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(backend, "write", refuse)
        before = counted("mediamesh_result_store_fallbacks_total")
        final = await generate(mesh, "kept anyway")
        assert final.state == common_pb2.SUCCEEDED, final
        assert mesh.scheduler.runtime.results[final.job_id].path.startswith(IN_STORE_PREFIX)
        chunks = mesh.gateway_stub().Download(gateway_pb2.DownloadRequest(job_id=final.job_id))
        assert b"".join([c.data async for c in chunks]) == final.result.data
        assert counted("mediamesh_result_store_fallbacks_total") == before + 1
    finally:
        await stop_mesh(mesh)


async def test_a_result_no_store_keeps_fails_its_job_alone(
    tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        artifacts = mesh.scheduler.runtime.batches.artifacts
        write = artifacts.write

        async def refuse_one(job_id: str, data: bytes, mime_type: str, seed: int) -> Any:
            if mesh.scheduler.runtime.core.jobs[job_id].params.prompt == "lost":
                raise OSError(5, "Input/output error at http://10.0.0.9:9000")
            return await write(job_id, data, mime_type, seed)

        monkeypatch.setattr(artifacts, "write", refuse_one)
        before = counted("mediamesh_result_write_failures_total")
        lost, kept = await asyncio.gather(generate(mesh, "lost"), generate(mesh, "kept"))
        assert lost.state == common_pb2.FAILED
        assert lost.error.code == "UNAVAILABLE"
        assert "could not be stored" in lost.error.message
        assert "10.0.0.9" not in lost.error.message
        assert kept.state == common_pb2.SUCCEEDED
        assert counted("mediamesh_result_write_failures_total") == before + 1
    finally:
        await stop_mesh(mesh)
