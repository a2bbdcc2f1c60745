"""A result kept in the job store because the bucket refused it is wanted as a URL: while
the bucket still refuses the copy, GetJob and Watch answer without a URL (the result is
served by Download as any kept result is), not INTERNAL; a later read copies it and signs."""

from __future__ import annotations

from pathlib import Path

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.scheduler.store.artifacts import LocalArtifactStore, SignedUrl, StoredArtifact
from tests.service.conftest import start_mesh, stop_mesh


class FlakyBucket(LocalArtifactStore):
    """A backend that signs URLs and refuses writes while `down`."""

    signs_urls = True  # type: ignore[assignment]

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.down = True

    async def write(self, job_id: str, data: bytes, mime_type: str, seed: int) -> StoredArtifact:
        if self.down:
            raise OSError("the bucket is unreachable")
        return await super().write(job_id, data, mime_type, seed)

    async def signed_url(self, path: str) -> SignedUrl | None:
        return SignedUrl(f"https://bucket.example/{Path(path).name}", 1)


async def test_a_kept_result_whose_copy_fails_is_answered_without_a_url(
    tmp_path: Path, models_dir: Path
) -> None:
    mesh = await start_mesh(tmp_path, models_dir, [["echo"]])
    try:
        bucket = FlakyBucket(tmp_path / "bucket")
        mesh.scheduler.runtime.artifacts.backend.backend = bucket  # type: ignore[attr-defined]
        stub = mesh.gateway_stub()
        request = common_pb2.GenerateRequest(model="echo", prompt="kept", result_as_url=True)
        events = [e async for e in stub.Generate(request, timeout=60)]
        final = events[-1]
        assert final.state == common_pb2.SUCCEEDED and not final.result.url, final
        job = await stub.GetJob(gateway_pb2.GetJobRequest(job_id=final.job_id), timeout=10)
        assert job.state == common_pb2.SUCCEEDED and not job.result.url
        chunks = stub.Download(gateway_pb2.DownloadRequest(job_id=final.job_id), timeout=10)
        assert (b"".join([c.data async for c in chunks]))[:4] == b"\x89PNG"

        bucket.down = False
        job = await stub.GetJob(gateway_pb2.GetJobRequest(job_id=final.job_id), timeout=10)
        assert job.result.url == f"https://bucket.example/{final.job_id}.png"
    finally:
        await stop_mesh(mesh)
