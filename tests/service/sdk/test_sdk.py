"""The Python SDK against an in-process mesh: typed events, every call, API keys, TLS, and
over-limit answers with their pushback."""

from __future__ import annotations

import asyncio
import hashlib
import io
import sys
import time
from pathlib import Path

import grpc
import pytest
from PIL import Image

from mediamesh import AsyncClient, Client
from mediamesh.common.errors import PUSHBACK_KEY, RETRY_AFTER_KEY
from mediamesh.common.generated.v1 import common_pb2
from mediamesh.sdk import (
    DeletedJob,
    Error,
    Event,
    GatewayError,
    JobState,
    ModelLimits,
    Notice,
    Priority,
    Progress,
    Queued,
    Result,
)
from tests.conftest import ROOT
from tests.service.conftest import stop_mesh
from tests.service.gateway.conftest import KEY_A, KEY_B, auth, keyed
from tests.service.sdk.conftest import INLINE_LIMIT, Certificates, address_of, sdk_mesh_with


def png_size(data: bytes) -> tuple[int, int]:
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG"
    return image.size


async def test_generate_streams_typed_events_and_ends_with_the_whole_result(sdk_mesh):
    address = address_of(sdk_mesh)

    def blocking() -> list[Event]:
        with Client(address, api_key=KEY_A) as client:
            return list(client.generate("flux-tiny", "a red fox", steps=3, seed=5))

    events = await asyncio.to_thread(blocking)
    assert isinstance(events[0], Queued) and events[0].state is JobState.QUEUED
    steps = [e.step for e in events if isinstance(e, Progress)]
    assert steps == [1, 2, 3]
    assert all(e.total_steps == 3 and e.attempt == 1 for e in events if isinstance(e, Progress))
    assert all(isinstance(e, Queued | Progress | Notice) for e in events[:-1])
    assert len({e.job_id for e in events}) == 1
    result = events[-1]
    assert isinstance(result, Result) and result.state is JobState.SUCCEEDED
    # Above the inline limit: the SDK downloaded it and checked it against its hash.
    assert result.size_bytes == len(result.data) > INLINE_LIMIT
    assert hashlib.sha256(result.data).hexdigest() == result.sha256
    assert result.seed == 5 and result.mime_type == "image/png"
    assert png_size(result.data) == (64, 64)

    async with AsyncClient(address, api_key=KEY_A) as client:
        again = [e async for e in client.generate("flux-tiny", "a red fox", steps=3, seed=5)]
    assert isinstance(again[-1], Result) and again[-1].data == result.data  # same seed


async def test_submit_watch_get_list_models_and_download(sdk_mesh):
    async with AsyncClient(address_of(sdk_mesh), api_key=KEY_A) as client:
        models = {m.name: m for m in await client.list_models()}
        assert {"flux-tiny", "echo"} <= set(models)
        flux = models["flux-tiny"]
        assert flux.ready and flux.modality == "image" and flux.mime_type == "image/png"
        assert isinstance(flux.limits, ModelLimits) and flux.limits.max_steps >= 3
        assert not models["wan-tiny"].ready  # no worker hosts it

        handle = await client.submit(
            "flux-tiny", "a fox", steps=2, seed=9, width=64, height=32, priority="realtime"
        )
        assert handle.state is JobState.QUEUED and not handle.deduplicated
        # The answer describes the job already, as `get` would.
        assert handle.job is not None and handle.job.job_id == handle.job_id
        assert (handle.job.prompt, handle.job.steps, handle.job.priority) == (
            "a fox",
            2,
            Priority.REALTIME,
        )
        events = [e async for e in client.watch(handle.job_id)]
        result = events[-1]
        assert isinstance(result, Result) and png_size(result.data) == (64, 32)

        info = await client.get(handle.job_id)
        assert info.state is JobState.SUCCEEDED and info.model == "flux-tiny"
        assert info.priority is Priority.REALTIME and info.seed == 9 and info.tenant == "a"
        assert info.mime_type == "image/png" and info.total_steps == 2
        asked = (info.prompt, info.steps, info.width, info.height, info.num_frames, info.fps)
        assert asked == ("a fox", 2, 64, 32, 0, 0), "an image has no frames nor fps"

        artifact = await client.download(handle.job_id)
        assert artifact.data == result.data and artifact.mime_type == "image/png"
        assert artifact.sha256 == hashlib.sha256(artifact.data).hexdigest()

        # A finished job is replayed at once to a later watcher.
        replay = [e async for e in client.watch(handle.job_id)]
        assert isinstance(replay[-1], Result) and replay[-1].data == result.data

        first = await client.submit("echo", "same", idempotency_key="k-1")
        second = await client.submit("echo", "same", idempotency_key="k-1")
        assert second.job_id == first.job_id and second.deduplicated
        # Without a key of its own each call gets a fresh one: two jobs, not one.
        one, two = await client.submit("echo", "x"), await client.submit("echo", "x")
        assert one.job_id != two.job_id


async def test_cancel_ends_a_queued_job_and_can_be_repeated(sdk_mesh):
    async with AsyncClient(address_of(sdk_mesh), api_key=KEY_A) as client:
        handle = await client.submit("wan-tiny", "waits: no worker hosts it", steps=1)
        assert (await client.get(handle.job_id)).state is JobState.QUEUED
        cancelled = await client.cancel(handle.job_id)
        assert cancelled.state is JobState.CANCELLED
        assert (await client.cancel(handle.job_id)).state is JobState.CANCELLED
        events = [e async for e in client.watch(handle.job_id)]
        error = events[-1]
        assert isinstance(error, Error) and error.state is JobState.CANCELLED
        assert error.code == "CANCELLED" and error.job_id == handle.job_id
        with pytest.raises(GatewayError) as caught:
            await client.download(handle.job_id)
        assert caught.value.code == "FAILED_PRECONDITION"


async def test_delete_job_deletes_an_ended_job_and_refuses_one_that_has_not_ended(sdk_mesh):
    address = address_of(sdk_mesh)
    async with AsyncClient(address, api_key=KEY_A) as client:
        waiting = await client.submit("wan-tiny", "waits: no worker hosts it", steps=1)
        with pytest.raises(GatewayError) as caught:
            await client.delete_job(waiting.job_id)
        assert caught.value.code == "FAILED_PRECONDITION" and caught.value.field == "job_id"
        assert waiting.job_id in caught.value.message and "cancel" in caught.value.message
        assert (await client.get(waiting.job_id)).state is JobState.QUEUED
        await client.cancel(waiting.job_id)
        deleted = await client.delete_job(waiting.job_id)
        assert (deleted.job_id, deleted.state, deleted.result_bytes) == (
            waiting.job_id,
            JobState.CANCELLED,
            0,
        )
        done = await client.submit("flux-tiny", "a fox", steps=1, idempotency_key="k-del")
        [e async for e in client.watch(done.job_id)]
        size = (await client.get(done.job_id)).size_bytes
        assert size > 0

    def blocking_delete(key: str) -> object:
        with Client(address, api_key=key) as client:
            return client.delete_job(done.job_id)

    with pytest.raises(GatewayError) as caught:
        await asyncio.to_thread(blocking_delete, KEY_B)
    assert caught.value.code == "NOT_FOUND", "another tenant's job is not theirs to delete"
    assert await asyncio.to_thread(blocking_delete, KEY_A) == DeletedJob(
        done.job_id, JobState.SUCCEEDED, size
    )
    async with AsyncClient(address, api_key=KEY_A) as client:
        for gone in (client.get, client.download, client.delete_job):
            with pytest.raises(GatewayError) as caught:
                await gone(done.job_id)
            assert caught.value.code == "NOT_FOUND", gone
        again = await client.submit("flux-tiny", "a fox", steps=1, idempotency_key="k-del")
        assert again.job_id != done.job_id and not again.deduplicated


async def test_keys_and_refusals_are_gateway_errors(sdk_mesh):
    address = address_of(sdk_mesh)
    for key in (None, "wrong-key"):
        async with AsyncClient(address, api_key=key) as client:
            with pytest.raises(GatewayError) as caught:
                await client.list_models()
            assert caught.value.code == "UNAUTHENTICATED"
    async with AsyncClient(address, api_key=KEY_A) as client:
        handle = await client.submit("echo", "mine")
        with pytest.raises(GatewayError) as caught:
            [e async for e in client.generate("no-such-model", "x")]
        assert caught.value.code == "NOT_FOUND"
        with pytest.raises(GatewayError) as caught:
            await client.submit("flux-tiny", "x", steps=100_000)
        assert caught.value.code == "INVALID_ARGUMENT" and "steps" in caught.value.message
        with pytest.raises(TypeError, match="stepz"):
            client.generate("echo", "x", stepz=3)  # type: ignore[call-arg]
        with pytest.raises(ValueError, match="priority must be one of"):
            await client.submit("echo", "x", priority="urgent")
    async with AsyncClient(address, api_key=KEY_B) as other:
        with pytest.raises(GatewayError) as caught:
            await other.get(handle.job_id)
        assert caught.value.code == "NOT_FOUND"  # another tenant's job


async def test_a_tls_gateway_with_the_sdk_and_the_cli(
    tmp_path: Path, models_dir: Path, certificates: Certificates
):
    tls = {"cert_file": str(certificates.server_cert), "key_file": str(certificates.server_key)}
    mesh = await sdk_mesh_with(tmp_path, models_dir, tls=tls)
    address = address_of(mesh)
    try:
        async with AsyncClient(address, api_key=KEY_A, ca_file=certificates.ca) as client:
            assert "echo" in {m.name for m in await client.list_models()}
            events = [e async for e in client.generate("echo", "over TLS", seed=1)]
            assert isinstance(events[-1], Result) and events[-1].data

        async with AsyncClient(address, api_key=KEY_A) as plaintext:
            with pytest.raises(GatewayError) as caught:
                await plaintext.list_models()
            assert caught.value.code == "UNAVAILABLE"

        out = tmp_path / "fox.png"
        cli = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mediamesh.cli.main", "generate", "--gateway", address,
            "--api-key", KEY_A, "--ca-file", str(certificates.ca), "--model", "flux-tiny",
            "--prompt", "a red fox", "--steps", "1", "--seed", "2", "--out", str(out), "--quiet",
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stdout, stderr = await asyncio.wait_for(cli.communicate(), 120)
        assert cli.returncode == 0, stderr.decode()
        assert png_size(out.read_bytes()) == (64, 64) and stdout.decode() == f"{out}\n"
    finally:
        await stop_mesh(mesh)


async def test_over_limit_answers_carry_pushback_and_the_sdk_waits_when_asked(
    tmp_path: Path, models_dir: Path
):
    # One request, then one more every half second.
    mesh = await sdk_mesh_with(
        tmp_path, models_dir, **keyed(a={"requests_per_second": 2, "burst": 1})
    )
    address = address_of(mesh)
    request = common_pb2.GenerateRequest(model="echo", prompt="x")
    try:
        stub = mesh.gateway_stub()
        await stub.Submit(request, metadata=auth(KEY_A))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Submit(request, metadata=auth(KEY_A))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        trailing = dict(caught.value.trailing_metadata() or ())
        assert trailing[PUSHBACK_KEY] == trailing[RETRY_AFTER_KEY]
        assert 0 < int(trailing[PUSHBACK_KEY]) <= 500

        async with AsyncClient(address, api_key=KEY_A) as plain:
            with pytest.raises(GatewayError) as refused:
                await plain.submit("echo", "x")
            assert refused.value.code == "RESOURCE_EXHAUSTED"
            assert 0 < refused.value.retry_after_s <= 0.5

        async with AsyncClient(address, api_key=KEY_A, retry_on_overload=True) as patient:
            started = time.monotonic()
            handles = [await patient.submit("echo", f"p{i}") for i in range(3)]
            # Three more tokens at two per second: the SDK waited as told, about a second.
            assert time.monotonic() - started >= 0.9
            assert len({h.job_id for h in handles}) == 3
            events = [e async for e in patient.generate("echo", "after a wait")]
            assert isinstance(events[-1], Result)

        def blocking_submit() -> str:
            with Client(address, api_key=KEY_A, retry_on_overload=True) as client:
                return client.submit("echo", "blocking").job_id

        # The generate above took the last token, so this one waits too.
        assert await asyncio.to_thread(blocking_submit)
    finally:
        await stop_mesh(mesh)
