"""Results as presigned URLs from S3-compatible storage, through `mediamesh up`: the
scheduler stores results in a bucket on a real S3-protocol server (moto, on loopback), and a
client fetches its result from the URL alone."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator

import grpc
import httpx
import pytest

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from tests.s3_server import CREDENTIALS, S3Server, s3_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


def test_a_job_result_comes_back_as_a_presigned_url_that_serves_it(
    launch, s3: S3Server, monkeypatch
):
    # The standard AWS variables, as an operator would set them for the scheduler.
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    mesh = launch([{"models": ["echo"]}], scheduler={"artifacts": s3.artifact_settings()})
    with grpc.insecure_channel(mesh.gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        request = common_pb2.GenerateRequest(
            model="echo", prompt="a bucket", width=32, height=32, seed=9, result_as_url=True
        )
        events = list(stub.Generate(request, timeout=120))
        job_id, result = events[-1].job_id, events[-1].result
        assert events[-1].state == common_pb2.SUCCEEDED
        assert not result.data and result.artifact.size_bytes > 0
        assert result.url.startswith(s3.endpoint + "/")
        assert result.url_expires_unix_ms > time.time() * 1000

        fetched = httpx.get(result.url, timeout=30)
        assert fetched.status_code == 200
        assert fetched.headers["content-type"] == "image/png"
        assert hashlib.sha256(fetched.content).hexdigest() == result.artifact.sha256
        assert f"results/{job_id}.png" in s3.object_keys()

        # GetJob signs a fresh URL; Download streams the same bytes from the bucket.
        info = stub.GetJob(gateway_pb2.GetJobRequest(job_id=job_id), timeout=30)
        assert info.result.url.startswith(s3.endpoint + "/")
        chunks = stub.Download(gateway_pb2.DownloadRequest(job_id=job_id), timeout=30)
        assert b"".join(c.data for c in chunks) == fetched.content

        # Without result_as_url a small result still comes inline.
        plain = list(stub.Generate(common_pb2.GenerateRequest(model="echo", prompt="x")))[-1]
        assert plain.result.data and not plain.result.url

        # The SDK leaves a URL result undownloaded.
        from mediamesh import Client
        from mediamesh.sdk import Result

        with Client(mesh.gateway) as client:
            sdk_result = list(client.generate("echo", "sdk url", result_as_url=True))[-1]
        assert isinstance(sdk_result, Result)
        assert not sdk_result.data and sdk_result.url.startswith(s3.endpoint + "/")
        assert httpx.get(sdk_result.url, timeout=30).status_code == 200
