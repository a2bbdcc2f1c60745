"""`mediamesh batch` against a gateway that does not answer: it stops, and records nothing."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from mediamesh.cli import batch_command
from mediamesh.cli.batch_command import BatchRun, GatewayUnreachableError
from mediamesh.cli.batch_file import read_batch
from mediamesh.cli.main import main as cli_main
from mediamesh.sdk import GatewayError, JobHandle, JobState, Result


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_gateway_stops_the_run_at_once_with_nothing_recorded(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(batch_command, "UNREACHABLE_AFTER_S", 1.0)
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "out"
    prompts.write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(40)))
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    argv = ["batch", str(prompts), "--out", str(out), "--model", "echo", "--quiet"]
    code = cli_main([*argv, "--gateway", address])
    elapsed = time.monotonic() - started
    stdout, stderr = capsys.readouterr()
    assert code == 2 and not stdout
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith(f"mediamesh batch: gateway unreachable at {address}: ")
    assert "(no answer for 1 s; stopped, re-run to resume)" in stderr
    assert elapsed < 15  # each line on its own would retry for some 38 s
    assert (out / "manifest.jsonl").read_text() == ""  # a later run starts them all


class HalfDownClient:
    """Answers prompts starting "ok"; UNAVAILABLE for the rest, as a gateway gone away."""

    settings = SimpleNamespace(target="gateway.example:50051")

    async def submit(self, model: str, prompt: str, **options: object) -> JobHandle:
        if not prompt.startswith("ok"):
            raise GatewayError("UNAVAILABLE", "failed to connect to all addresses")
        return JobHandle(job_id=f"job-{prompt}", state=JobState.QUEUED)

    async def watch(self, job_id: str) -> AsyncIterator[Result]:
        yield Result(
            job_id=job_id, state=JobState.SUCCEEDED, data=b"x", mime_type="image/png", seed=1
        )


def test_lines_done_before_the_gateway_went_away_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(batch_command, "UNREACHABLE_AFTER_S", 0.2)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "ok 1"}\n{"prompt": "down"}\n{"prompt": "ok 3"}\n')
    manifest = io.StringIO()
    bar = SimpleNamespace(update=lambda n: None, set_postfix=lambda **kw: None)
    client: Any = HalfDownClient()  # only what BatchRun calls
    run = BatchRun(client, tmp_path, manifest, bar, "prompts.jsonl")
    with pytest.raises(ExceptionGroup) as caught:
        asyncio.run(run.run(read_batch(prompts, "echo"), concurrency=1))
    assert caught.group_contains(GatewayUnreachableError, match="gateway.example:50051")
    rows = [json.loads(text) for text in manifest.getvalue().splitlines()]
    assert [(row["line"], row["state"]) for row in rows] == [(1, "SUCCEEDED")]
