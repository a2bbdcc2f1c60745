"""The artifact store's backends against real storage: local disk, and S3 through moto's
S3 server on loopback, spoken to with the product's own S3 client."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from mediamesh.common.settings import SchedulerSettings
from mediamesh.scheduler.store.artifact_backends import build_artifact_store
from mediamesh.scheduler.store.artifacts import ArtifactStore, LocalArtifactStore
from tests.s3_server import CREDENTIALS, S3Server, s3_server

DATA = bytes(range(256)) * 41  # 10 496 bytes: several chunks, the last one short


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture(params=["local", "s3"])
async def store(request, tmp_path: Path, s3: S3Server) -> AsyncIterator[ArtifactStore]:
    artifacts = {"backend": "local"} if request.param == "local" else s3.artifact_settings()
    settings = SchedulerSettings.model_validate(
        {"artifact_dir": str(tmp_path / "artifacts"), "artifacts": artifacts}
    )
    backend = build_artifact_store(settings, CREDENTIALS)
    yield backend
    await backend.close()


async def collect(
    store: ArtifactStore, path: str, offset: int, chunk: int
) -> list[tuple[int, bytes]]:
    return [item async for item in store.chunks(path, offset, chunk)]


async def test_write_read_and_ranged_chunks(store: ArtifactStore):
    artifact = await store.write("job-1", DATA, "image/png", 7)
    assert artifact.size_bytes == len(DATA)
    assert artifact.sha256 == hashlib.sha256(DATA).hexdigest()
    assert artifact.path.endswith("job-1.png") and artifact.seed == 7
    assert await store.read(artifact.path) == DATA
    assert await store.exists(artifact.path)

    pieces = await collect(store, artifact.path, 0, 4096)
    assert [o for o, _ in pieces] == [0, 4096, 8192]
    assert all(len(d) <= 4096 for _, d in pieces)
    assert b"".join(d for _, d in pieces) == DATA
    # From an offset in the middle of a chunk, and from the very end (nothing).
    tail = await collect(store, artifact.path, 5000, 4096)
    assert tail[0][0] == 5000 and b"".join(d for _, d in tail) == DATA[5000:]
    assert await collect(store, artifact.path, len(DATA), 4096) == []


async def test_delete_is_idempotent(store: ArtifactStore):
    artifact = await store.write("job-2", b"gone soon", "image/png", 1)
    await store.delete(artifact.path)
    assert not await store.exists(artifact.path)
    await store.delete(artifact.path)  # already gone: fine
    await store.delete(None)


async def test_only_the_s3_backend_signs_urls_and_the_url_serves_the_bytes(
    store: ArtifactStore, s3: S3Server
):
    artifact = await store.write("job-3", DATA, "image/webp", 3)
    signed = await store.signed_url(artifact.path)
    if isinstance(store, LocalArtifactStore):
        assert signed is None
        return
    assert signed is not None and signed.url.startswith(s3.endpoint)
    assert "X-Amz-Signature=" in signed.url and signed.expires_unix_ms > 0
    # Fetched as a browser would: no credentials, only the URL.
    async with httpx.AsyncClient() as client:
        response = await client.get(signed.url)
    assert response.status_code == 200
    assert response.content == DATA
    assert response.headers["content-type"] == "image/webp"
    assert f"results/{artifact.path}" in s3.object_keys()


async def test_urls_are_signed_for_the_public_endpoint_clients_reach(tmp_path: Path, s3: S3Server):
    # Inside Compose the scheduler reaches the service as http://minio:9000, clients as
    # another host: a SigV4 signature covers the host, so it must name the public one.
    public = "http://media.example.test:9000"
    artifacts = {**s3.artifact_settings(), "public_endpoint_url": public}
    settings = SchedulerSettings.model_validate(
        {"artifact_dir": str(tmp_path / "artifacts"), "artifacts": artifacts}
    )
    store = build_artifact_store(settings, CREDENTIALS)
    try:
        artifact = await store.write("job-4", DATA, "image/png", 4)
        signed = await store.signed_url(artifact.path)
        assert signed is not None and signed.url.startswith(f"{public}/{s3.bucket}/results/")
        assert "X-Amz-Signature=" in signed.url
        # The scheduler's own reads still go to the endpoint it reaches.
        assert await store.read(artifact.path) == DATA
        # The same request through the route clients take (here: the same server).
        async with httpx.AsyncClient() as client:
            response = await client.get(signed.url.replace(public, s3.endpoint, 1))
        assert response.status_code == 200 and response.content == DATA
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("artifacts", "words"),
    [
        ({"public_endpoint_url": "minio:9000"}, "public_endpoint_url: 'minio:9000' is not"),
        ({"endpoint_url": "ftp://x"}, "endpoint_url: 'ftp://x' is not an http"),
    ],
)
def test_endpoints_must_be_http_urls(s3: S3Server, artifacts: dict, words: str):
    with pytest.raises(ValueError, match=words):
        SchedulerSettings.model_validate({"artifacts": {**s3.artifact_settings(), **artifacts}})


def test_only_the_s3_backend_takes_a_public_endpoint():
    with pytest.raises(ValueError, match="only the s3 backend signs URLs"):
        SchedulerSettings.model_validate(
            {"artifacts": {"backend": "local", "public_endpoint_url": "https://x.test"}}
        )


async def test_the_sweep_takes_old_results_alone(store: ArtifactStore, tmp_path: Path):
    results = [await store.write(f"{n:032x}", b"left over", "image/png", 1) for n in (1, 2)]
    other = await store.write("not-a-job-id", b"someone else's", "image/png", 1)
    if isinstance(store, LocalArtifactStore):
        beside = tmp_path / "artifacts" / "checkpoints" / f"{3:032x}.pt"
        beside.parent.mkdir(parents=True)
        beside.write_bytes(b"a checkpoint")

    assert await store.sweep(time.time() - 3600) == 0  # younger than the cut-off
    assert await store.sweep(time.time() + 60) == 2

    assert not any([await store.exists(r.path) for r in results])
    assert await store.exists(other.path)
    if isinstance(store, LocalArtifactStore):
        assert beside.exists()
