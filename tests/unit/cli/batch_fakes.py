"""A stand-in for the SDK's AsyncClient under `mediamesh batch`, and a way to run the command
with it: each line's job is made up from its fields, so runs can be checked offline."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace, TracebackType
from typing import Any

import pytest

from mediamesh.cli import batch_command
from mediamesh.cli.main import main as cli_main
from mediamesh.sdk import Artifact, Error, GatewayError, JobHandle, JobState, Result

MIME_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}


class FakeMesh:
    """What every FakeClient of a test shares: the jobs made, by idempotency key, and how a
    submit is answered (`refuse(prompt, attempt)` raises, or returns None to accept)."""

    def __init__(
        self,
        refuse: Callable[[str, int], GatewayError | None] | None = None,
        delays: dict[str, float] | None = None,
        result_quota_bytes: int = 0,
        signs_urls: bool = False,
    ) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}  # key -> the line's fields
        self.submits: list[str] = []  # every key sent, repeats included
        self.attempts: dict[str, int] = {}  # prompt -> submits of it
        self.refuse = refuse
        self.delays = delays or {}  # prompt -> seconds its job runs
        self.deleted: list[str] = []  # job ids, in the order delete_job was called
        # prompt -> what delete_job raises for its job, instead of deleting it
        self.delete_refusals: dict[str, GatewayError] = {}
        self.delete_delays: dict[str, float] = {}  # prompt -> seconds deleting its job takes
        # As the scheduler: a new key is refused while the results held (job id -> bytes)
        # reach the quota (0: none); a key it has is answered whatever it holds.
        self.result_quota_bytes = result_quota_bytes
        self.held: dict[str, int] = {}
        # As an S3 store above the inline limit: results come as a URL, their bytes by
        # download only.
        self.signs_urls = signs_urls

    def client(self, *_args: object, **_options: object) -> FakeClient:
        return FakeClient(self)


class FakeClient:
    """Only what BatchRun calls."""

    settings = SimpleNamespace(target="fake-gateway:50051")

    def __init__(self, mesh: FakeMesh) -> None:
        self.mesh = mesh

    async def __aenter__(self) -> FakeClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    async def submit(
        self, model: str, prompt: str, *, idempotency_key: str, **fields: Any
    ) -> JobHandle:
        mesh = self.mesh
        mesh.submits.append(idempotency_key)
        attempt = mesh.attempts[prompt] = mesh.attempts.get(prompt, 0) + 1
        if mesh.refuse is not None and (error := mesh.refuse(prompt, attempt)) is not None:
            raise error
        held = sum(mesh.held.values())
        if idempotency_key not in mesh.jobs and 0 < mesh.result_quota_bytes <= held:
            raise GatewayError(
                "RESOURCE_EXHAUSTED",
                f"result_quota_bytes: tenant 't' holds {held} bytes of results, at or over its "
                f"quota of {mesh.result_quota_bytes}",
            )
        mesh.jobs.setdefault(idempotency_key, {"prompt": prompt, **fields})
        return JobHandle(job_id=f"job-{idempotency_key}", state=JobState.QUEUED)

    async def delete_job(self, job_id: str) -> None:
        prompt = self.mesh.jobs[job_id.removeprefix("job-")]["prompt"]
        if (refusal := self.mesh.delete_refusals.get(prompt)) is not None:
            raise refusal
        await asyncio.sleep(self.mesh.delete_delays.get(prompt, 0))
        self.mesh.deleted.append(job_id)
        self.mesh.held.pop(job_id, None)

    async def watch(self, job_id: str) -> AsyncIterator[Result | Error]:
        fields = self.mesh.jobs[job_id.removeprefix("job-")]
        await asyncio.sleep(self.mesh.delays.get(fields["prompt"], 0))
        if fields["prompt"].startswith("fail"):
            yield Error(job_id=job_id, state=JobState.FAILED, code="INTERNAL", message="boom")
            return
        mime_type = MIME_TYPES[fields.get("output_format") or "png"]
        data = json.dumps(fields, sort_keys=True).encode()
        if job_id not in self.mesh.deleted:
            self.mesh.held[job_id] = len(data)
        if self.mesh.signs_urls:
            url = f"https://bucket.example/{job_id}?signature=x"
            yield Result(
                job_id=job_id,
                state=JobState.SUCCEEDED,
                data=b"",
                mime_type=mime_type,
                seed=1,
                size_bytes=len(data),
                url=url,
            )
            return
        yield Result(
            job_id=job_id, state=JobState.SUCCEEDED, data=data, mime_type=mime_type, seed=1
        )

    async def download(self, job_id: str) -> Artifact:
        fields = self.mesh.jobs[job_id.removeprefix("job-")]
        mime_type = MIME_TYPES[fields.get("output_format") or "png"]
        data = json.dumps(fields, sort_keys=True).encode()
        return Artifact(job_id=job_id, data=data, mime_type=mime_type, sha256="")


def write_lines(path: Path, *lines: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def run_batch(
    monkeypatch: pytest.MonkeyPatch, mesh: FakeMesh, prompts: Path, out: Path, *flags: str
) -> int:
    """`mediamesh batch prompts --out out --model echo --quiet` against `mesh`."""
    monkeypatch.setattr(batch_command, "AsyncClient", mesh.client)
    return cli_main(
        ["batch", str(prompts), "--out", str(out), "--model", "echo", "--quiet", *flags]
    )


def rows(out: Path) -> list[dict[str, Any]]:
    """The manifest's rows."""
    return [json.loads(text) for text in (out / "manifest.jsonl").read_text().splitlines()]
