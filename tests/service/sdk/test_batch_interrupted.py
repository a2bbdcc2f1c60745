"""Ctrl-C on `mediamesh batch` says in one line how to go on and exits 130; the lines in
flight are not recorded, so the same command resumes them."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from tests.conftest import ROOT
from tests.service.sdk.conftest import start_fake_gateway


class QuietGateway(gateway_pb2_grpc.GatewayServicer):
    """Accepts every Submit; its jobs stay queued, so every line stays in flight."""

    def __init__(self) -> None:
        self.watching = asyncio.Event()

    async def Submit(self, request, context):
        return gateway_pb2.JobHandle(
            job_id=f"job-{request.idempotency_key[-8:]}", state=common_pb2.QUEUED
        )

    async def Watch(self, request, context) -> AsyncIterator[common_pb2.GenerateEvent]:
        yield common_pb2.GenerateEvent(
            job_id=request.job_id, state=common_pb2.QUEUED, queued=common_pb2.Queued(position=1)
        )
        self.watching.set()
        await asyncio.sleep(60)


async def test_ctrl_c_says_how_to_resume_and_exits_130(tmp_path: Path) -> None:
    fake = QuietGateway()
    server = await start_fake_gateway(fake)
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "out"
    prompts.write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(10)))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mediamesh.cli.main", "batch", str(prompts), "--out", str(out),
        "--model", "echo", "--gateway", server.address, "--quiet",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await asyncio.wait_for(fake.watching.wait(), 60)
        process.send_signal(signal.SIGINT)
        stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
        await server.server.stop(0)
    assert process.returncode == 130
    assert stderr.decode() == "mediamesh batch: interrupted; re-run the same command to resume\n"
    assert stdout == b""
    assert (out / "manifest.jsonl").read_text() == ""  # nothing ended: a re-run resumes all
