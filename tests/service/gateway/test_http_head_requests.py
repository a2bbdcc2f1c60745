"""HEAD wherever GET answers (RFC 9110 9.3.2): a job's state and its event stream answer
with their headers and no body, and a job that is not the caller's is a 404 either way."""

from __future__ import annotations

import httpx
import pytest

from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A, KEY_B
from tests.service.gateway.http_support import (
    base_url,
    bearer,
    http_mesh,  # noqa: F401 (a fixture)
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_head_answers_a_jobs_headers_without_its_body(
    http_mesh: InProcessMesh,  # noqa: F811
) -> None:
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=60) as http:
        made = await http.post(
            "/v1/jobs", headers=bearer(KEY_A), json={"model": "echo", "prompt": "x"}
        )
        job_id = made.json()["job_id"]
        state = await http.head(f"/v1/jobs/{job_id}", headers=bearer(KEY_A))
        assert state.status_code == 200 and state.content == b""
        assert state.headers["content-type"] == "application/json"
        events = await http.head(f"/v1/jobs/{job_id}/events", headers=bearer(KEY_A))
        assert events.status_code == 200 and events.content == b""
        assert events.headers["content-type"].startswith("text/event-stream")
        assert events.headers["cache-control"] == "no-cache, no-transform"
        for path in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/events"):
            other = await http.head(path, headers=bearer(KEY_B))
            assert other.status_code == 404, path
