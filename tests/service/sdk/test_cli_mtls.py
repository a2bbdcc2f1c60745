"""`mediamesh generate` and `mediamesh batch` reach a gateway that requires mTLS."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from tests.conftest import ROOT
from tests.service.sdk.conftest import Certificates, start_fake_gateway

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


class OneResultGateway(gateway_pb2_grpc.GatewayServicer):
    """Accepts every job and answers its Watch with an inline result."""

    def __init__(self) -> None:
        self.submitted: list[str] = []

    async def Submit(self, request, context):
        self.submitted.append(request.prompt)
        return gateway_pb2.JobHandle(job_id=f"j-{len(self.submitted)}", state=common_pb2.QUEUED)

    async def Watch(self, request, context) -> AsyncIterator[common_pb2.GenerateEvent]:
        yield result(request.job_id)

    async def Generate(self, request, context) -> AsyncIterator[common_pb2.GenerateEvent]:
        self.submitted.append(request.prompt)
        yield result(f"j-{len(self.submitted)}")


def result(job_id: str) -> common_pb2.GenerateEvent:
    return common_pb2.GenerateEvent(
        job_id=job_id,
        state=common_pb2.SUCCEEDED,
        result=common_pb2.Result(data=PNG, mime_type="image/png", seed=1),
    )


async def run_cli(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mediamesh.cli.main", *args,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, stderr.decode()


async def test_batch_and_generate_take_the_client_certificate(
    certificates: Certificates, tmp_path: Path
):
    credentials = grpc.ssl_server_credentials(
        [(certificates.server_key.read_bytes(), certificates.server_cert.read_bytes())],
        root_certificates=certificates.ca.read_bytes(),
        require_client_auth=True,
    )
    fake = OneResultGateway()
    server = await start_fake_gateway(fake, credentials)
    mtls = (
        "--gateway", server.address, "--ca-file", str(certificates.ca),
        "--cert-file", str(certificates.client_cert), "--key-file", str(certificates.client_key),
    )  # fmt: skip
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "over mTLS"}) + "\n")
    try:
        code, stderr = await run_cli(
            "batch", str(prompts), "--out", str(tmp_path / "out"), "--model", "m", "--quiet", *mtls
        )
        assert code == 0, stderr
        rows = (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()
        assert json.loads(rows[0])["state"] == "SUCCEEDED"

        code, stderr = await run_cli(
            "generate", "--model", "m", "--prompt", "one", "--quiet",
            "--out", str(tmp_path / "one.png"), *mtls,
        )  # fmt: skip
        assert code == 0, stderr
        assert (tmp_path / "one.png").read_bytes() == PNG
        assert fake.submitted == ["over mTLS", "one"]
    finally:
        await server.server.stop(0)
