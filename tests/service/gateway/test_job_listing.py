"""Listing a tenant's jobs on every transport: gRPC ListJobs, GET /v1/jobs, the OpenAI
client's videos.list, the SDK and `mediamesh jobs`; each sees only its tenant's jobs."""

from __future__ import annotations

import asyncio
import json

import grpc
import httpx
import pytest
import pytest_asyncio

from mediamesh.cli.main import main as cli_main
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.sdk import AsyncClient, Client, JobState
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A, KEY_B, auth, finished_echo_jobs
from tests.service.gateway.http_support import (
    base_url,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
    openai_client,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def jobs_of_a(http_mesh: InProcessMesh) -> list[str]:  # noqa: F811
    """Three finished echo jobs of tenant a (oldest first) and one of tenant b."""
    mine = await finished_echo_jobs(http_mesh, KEY_A, 3)
    await finished_echo_jobs(http_mesh, KEY_B, 1)
    return mine


async def test_grpc_pages_hold_only_the_callers_jobs(http_mesh, jobs_of_a):  # noqa: F811
    stub = http_mesh.gateway_stub()
    first = await stub.ListJobs(gateway_pb2.ListJobsRequest(page_size=2), metadata=auth(KEY_A))
    assert [job.job_id for job in first.jobs] == jobs_of_a[:0:-1] and first.has_more
    assert {job.tenant for job in first.jobs} == {"a"}
    assert first.jobs[0].result.mime_type and not first.jobs[0].result.data  # a reference only
    rest = await stub.ListJobs(
        gateway_pb2.ListJobsRequest(page_size=2, after_job_id=first.jobs[-1].job_id),
        metadata=auth(KEY_A),
    )
    assert [job.job_id for job in rest.jobs] == jobs_of_a[:1] and not rest.has_more
    filtered = await stub.ListJobs(
        gateway_pb2.ListJobsRequest(states=[common_pb2.FAILED], models=["echo"]),
        metadata=auth(KEY_A),
    )
    assert list(filtered.jobs) == []
    theirs = await stub.ListJobs(gateway_pb2.ListJobsRequest(), metadata=auth(KEY_B))
    assert len(theirs.jobs) == 1 and theirs.jobs[0].tenant == "b"


@pytest.mark.parametrize(
    ("request_fields", "words"),
    [
        ({"page_size": 101}, "page_size: 101; at most 100 jobs"),
        ({"states": [0]}, "states[0]: JOB_STATE_UNSPECIFIED is not a job state"),
        ({"states": [42]}, "states[0]: 42 is not a job state"),
        ({"models": ["bad name!"]}, "models[0]:"),
    ],
)
async def test_grpc_refusals_name_the_field(http_mesh, request_fields, words):  # noqa: F811
    stub = http_mesh.gateway_stub()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ListJobs(gateway_pb2.ListJobsRequest(**request_fields), metadata=auth(KEY_A))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in caught.value.details()


async def test_another_tenants_job_cannot_start_a_page(http_mesh, jobs_of_a):  # noqa: F811
    stub = http_mesh.gateway_stub()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ListJobs(
            gateway_pb2.ListJobsRequest(after_job_id=jobs_of_a[0]), metadata=auth(KEY_B)
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith("after_job_id: no job ")


async def test_http_lists_pages_in_openai_list_shape(http_mesh, jobs_of_a):  # noqa: F811
    async with httpx.AsyncClient(base_url=base_url(http_mesh), headers=bearer(KEY_A)) as http:
        page = (await http.get("/v1/jobs", params={"limit": 2, "order": "asc"})).json()
        assert page["object"] == "list" and page["has_more"] is True
        assert [job["job_id"] for job in page["data"]] == jobs_of_a[:2]
        assert page["first_id"] == jobs_of_a[0] and page["last_id"] == jobs_of_a[1]
        assert page["data"][0]["links"]["self"] == f"/v1/jobs/{jobs_of_a[0]}"
        rest = await http.get(
            "/v1/jobs", params={"limit": 2, "order": "asc", "after": page["last_id"]}
        )
        assert [job["job_id"] for job in rest.json()["data"]] == jobs_of_a[2:]
        done = await http.get("/v1/jobs", params=[("state", "succeeded"), ("model", "echo")])
        assert {job["job_id"] for job in done.json()["data"]} == set(jobs_of_a)
        for params, status, words in (
            ({"state": "done"}, 400, "state: 'done' is not a job state"),
            ({"limit": 0}, 400, "limit: "),
            ({"limit": 101}, 400, "limit: "),
            ({"order": "up"}, 400, "order: "),
            ({"after": "no-such-job"}, 400, "after: no job 'no-such-job'"),
        ):
            refused = await http.get("/v1/jobs", params=params)
            assert refused.status_code == status, refused.text
            assert words in refused.json()["message"], refused.json()
        anonymous = await http.get("/v1/jobs", headers={"Authorization": ""})
        assert anonymous.status_code == 401


async def test_openai_videos_list_pages_through_the_video_jobs_only(http_mesh, jobs_of_a):  # noqa: F811
    client = openai_client(http_mesh)
    made = [
        await client.videos.create(model="wan-tiny", prompt=f"waves {i}", extra_body={"steps": 1})  # type: ignore[arg-type]
        for i in range(2)
    ]
    # One item a page: the client follows has_more and last_id through every page.
    listed = [video async for video in client.videos.list(limit=1)]
    assert [video.id for video in listed] == [made[1].id, made[0].id]
    assert all(video.object == "video" and video.model == "wan-tiny" for video in listed)
    ascending = await client.videos.list(order="asc")
    assert [video.id for video in ascending.data] == [made[0].id, made[1].id]
    others = openai_client(http_mesh, KEY_B)
    assert (await others.videos.list()).data == []
    await client.close()
    await others.close()


async def test_sdk_pages_and_iterates(http_mesh, jobs_of_a):  # noqa: F811
    address = f"127.0.0.1:{http_mesh.gateway.port}"
    async with AsyncClient(address, api_key=KEY_A) as client:
        page = await client.list_jobs(models=["echo"], page_size=1, oldest_first=True)
        assert [job.job_id for job in page.jobs] == jobs_of_a[:1] and page.has_more
        every = [job.job_id async for job in client.iter_jobs(states=["succeeded"])]
        assert [i for i in every if i in jobs_of_a] == jobs_of_a[::-1]
        with pytest.raises(ValueError, match="states: 'done' is not a job state"):
            await client.list_jobs(states=["done"])

    def blocking() -> list[str]:
        with Client(address, api_key=KEY_A) as client:
            oldest = client.iter_jobs(states=[JobState.SUCCEEDED], oldest_first=True)
            return [job.job_id for job in oldest if job.model == "echo"]

    assert await asyncio.to_thread(blocking) == jobs_of_a


async def test_the_jobs_command_prints_a_table_and_json_lines(http_mesh, jobs_of_a, capsys):  # noqa: F811
    gateway = ["--gateway", f"127.0.0.1:{http_mesh.gateway.port}", "--api-key", KEY_A]
    code = await asyncio.to_thread(cli_main, ["jobs", *gateway, "--model", "echo", "--json"])
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["job_id"] for line in lines] == jobs_of_a[::-1]
    assert lines[0]["state"] == "SUCCEEDED" and lines[0]["tenant"] == "a"
    code = await asyncio.to_thread(
        cli_main, ["jobs", *gateway, "--model", "echo", "--limit", "2", "--oldest-first"]
    )
    table = capsys.readouterr().out.splitlines()
    assert code == 0 and table[0].split()[:3] == ["JOB", "MODEL", "STATE"]
    assert [row.split()[0] for row in table[1:]] == jobs_of_a[:2]
    code = await asyncio.to_thread(cli_main, ["jobs", *gateway, "--after", "no-such-job"])
    assert code == 1 and "after_job_id: no job 'no-such-job'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        await asyncio.to_thread(cli_main, ["jobs", *gateway, "--state", "done"])
    assert exited.value.code == 2
    assert "argument --state: 'done' is not a job state" in capsys.readouterr().err


async def test_watch_writes_a_jobs_result_cancel_stops_one_and_delete_deletes_it(
    http_mesh,  # noqa: F811
    jobs_of_a,
    tmp_path,
    capsys,
):
    gateway = ["--gateway", f"127.0.0.1:{http_mesh.gateway.port}", "--api-key", KEY_A]
    out = tmp_path / "watched"
    code = await asyncio.to_thread(
        cli_main, ["watch", jobs_of_a[0], *gateway, "--out", str(out), "--quiet"]
    )
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "watched.png").read_bytes().startswith(b"\x89PNG")
    assert capsys.readouterr().out == f"{tmp_path / 'watched.png'}\n"  # --quiet: the path alone

    stub = http_mesh.gateway_stub()
    slow = common_pb2.GenerateRequest(model="flux-tiny", prompt="slow", steps=50)
    handle = await stub.Submit(slow, metadata=auth(KEY_A))
    # Submit's answer describes the job as GetJob would, resolved parameters included.
    assert (handle.job.job_id, handle.job.model, handle.job.steps) == (
        handle.job_id,
        "flux-tiny",
        50,
    )
    assert handle.job.state == handle.state
    code = await asyncio.to_thread(cli_main, ["cancel", handle.job_id, *gateway])
    assert (code, capsys.readouterr().out) == (0, f"job {handle.job_id} CANCELLED\n")
    # An ended job stays as it ended: cancel says so and exits 1.
    code = await asyncio.to_thread(cli_main, ["cancel", jobs_of_a[0], *gateway])
    assert (code, capsys.readouterr().out) == (1, f"job {jobs_of_a[0]} SUCCEEDED\n")
    code = await asyncio.to_thread(cli_main, ["cancel", jobs_of_a[0], "--gateway", gateway[1]])
    assert code == 1 and "UNAUTHENTICATED" in capsys.readouterr().err
    # Once ended, the cancelled job can be deleted; then it is unknown.
    code = await asyncio.to_thread(cli_main, ["delete", handle.job_id, *gateway])
    expected = f"job {handle.job_id} deleted (CANCELLED, 0 bytes of result)\n"
    assert (code, capsys.readouterr().out) == (0, expected)
    code = await asyncio.to_thread(cli_main, ["delete", handle.job_id, *gateway])
    assert code == 1 and "NOT_FOUND" in capsys.readouterr().err
