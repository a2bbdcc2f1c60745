"""A job's result over HTTP as a cache and a downloader need it: a Range header that cannot
be read means the whole body (never a 500), one past any end a 416 naming the length, and
the bytes, which never change, come with their ETag (If-None-Match answers 304), caching
headers and a file name of the right extension."""

from __future__ import annotations

import httpx
import pytest

from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A, KEY_B
from tests.service.gateway.http_support import (
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
    openai_client,
    read_events,
    video_when_ended,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def finished_result(client: httpx.AsyncClient) -> tuple[str, bytes]:
    """The result path of a finished echo job, and its bytes."""
    made = await client.post(
        "/v1/jobs", json={"model": "echo", "prompt": "cache me", "steps": 1}, headers=bearer(KEY_A)
    )
    job_id = made.json()["job_id"]
    await read_events(client, job_id, KEY_A)
    path = f"/v1/jobs/{job_id}/result"
    whole = await client.get(path, headers=bearer(KEY_A))
    assert whole.status_code == 200, whole.text
    return path, whole.content


@pytest.mark.parametrize(
    "unreadable",
    ["bytes=x-5", "bytes=0-\u00b2", "bytes=\u0663-", "bytes=-\u00b2", "bytes=5-x", "bytes=--1"],
)
async def test_a_range_that_cannot_be_read_means_the_whole_body(
    client: httpx.AsyncClient, unreadable: str
) -> None:
    path, whole = await finished_result(client)
    # httpx sends header values as Latin-1 or UTF-8 bytes, as a browser or curl may.
    headers = {**bearer(KEY_A), "Range": unreadable.encode()}
    answer = await client.get(path, headers=headers)  # type: ignore[dict-item]
    assert answer.status_code == 200, answer.text
    assert answer.content == whole and "content-range" not in answer.headers


@pytest.mark.parametrize(
    "beyond", ["bytes=99999999999999999999999-", f"bytes={2**64}-", f"bytes={'9' * 5000}-"]
)
async def test_a_range_past_any_end_is_416_naming_the_length(
    client: httpx.AsyncClient, beyond: str
) -> None:
    path, whole = await finished_result(client)
    answer = await client.get(path, headers={**bearer(KEY_A), "Range": beyond})
    assert answer.status_code == 416, answer.text
    assert answer.headers["content-range"] == f"bytes */{len(whole)}"


async def test_huge_last_bytes_and_suffixes_stay_within_the_body(client: httpx.AsyncClient) -> None:
    path, whole = await finished_result(client)
    to_the_end = await client.get(path, headers={**bearer(KEY_A), "Range": f"bytes=2-{'9' * 40}"})
    assert to_the_end.status_code == 206 and to_the_end.content == whole[2:]
    suffix = await client.get(path, headers={**bearer(KEY_A), "Range": f"bytes=-{'9' * 40}"})
    assert suffix.status_code == 206 and suffix.content == whole


async def test_a_cached_copy_is_confirmed_with_304_and_the_bytes_are_cached_for_good(
    client: httpx.AsyncClient,
) -> None:
    path, whole = await finished_result(client)
    answer = await client.get(path, headers=bearer(KEY_A))
    etag = answer.headers["etag"]
    assert answer.headers["cache-control"] == "private, max-age=86400, immutable"
    assert "Authorization" in answer.headers["vary"]
    job_id = path.split("/")[3]
    assert answer.headers["content-disposition"] == f'inline; filename="{job_id}.png"'
    for named in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        for method in ("GET", "HEAD"):
            cached = await client.request(
                method, path, headers={**bearer(KEY_A), "If-None-Match": named}
            )
            assert cached.status_code == 304, (method, named, cached.text)
            assert cached.content == b"" and cached.headers["etag"] == etag
            assert cached.headers["cache-control"].endswith("immutable")
    # Another tag, and a range with it: the bytes as asked.
    other = {**bearer(KEY_A), "If-None-Match": '"not-it"', "Range": "bytes=1-3"}
    ranged = await client.get(path, headers=other)
    assert ranged.status_code == 206 and ranged.content == whole[1:4]
    # A tenant that may not read the job learns nothing from its ETag either.
    foreign = await client.get(path, headers={**bearer(KEY_B), "If-None-Match": etag})
    assert foreign.status_code == 404


async def test_a_range_for_another_copy_answers_the_whole_body(client: httpx.AsyncClient) -> None:
    """If-Range (RFC 9110 13.1.5): a resuming client whose validator is not this result's
    ETag gets all of it, not a part to splice onto bytes of something else."""
    path, whole = await finished_result(client)
    etag = (await client.head(path, headers=bearer(KEY_A))).headers["etag"]
    ranged = {**bearer(KEY_A), "Range": "bytes=0-9"}
    same = await client.get(path, headers={**ranged, "If-Range": etag})
    assert same.status_code == 206 and same.content == whole[:10]
    for other in ('"0000"', f"W/{etag}", "Sun, 06 Nov 1994 08:49:37 GMT"):
        answer = await client.get(path, headers={**ranged, "If-Range": other})
        assert answer.status_code == 200, (other, answer.status_code)
        assert answer.content == whole and "content-range" not in answer.headers


async def test_a_video_is_named_mp4_and_confirmed_with_304(
    http_mesh: InProcessMesh,  # noqa: F811
    client: httpx.AsyncClient,
) -> None:
    openai = openai_client(http_mesh)
    video = await openai.videos.create(
        model="wan-tiny", prompt="a cached video", seconds="1", size="64x64"
    )
    assert (await video_when_ended(openai, video.id)).status == "completed"
    path = f"/v1/videos/{video.id}/content"
    answer = await client.get(path, headers=bearer(KEY_A))
    assert answer.headers["content-disposition"] == f'inline; filename="{video.id}.mp4"'
    cached = await client.get(
        path, headers={**bearer(KEY_A), "If-None-Match": answer.headers["etag"]}
    )
    assert cached.status_code == 304 and cached.content == b""
