"""DELETE /v1/videos/{id} decides between cancelling and deleting from the job's state: a
video that has not ended is cancelled, an ended one deleted, and one that ends on its own
between the read and the cancel (Cancel answers it ended, not CANCELLED) deleted too."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from mediamesh.common.errors import FailedPrecondition
from mediamesh.gateway.http import errors, openai_videos
from mediamesh.gateway.http.context import HttpContext

VIDEO = "0123456789abcdef0123456789abcdef"


class FakePlane:
    """A JsonPlane that holds one wan-tiny job: its state when read, the state Cancel leaves
    it in, and whether DeleteJob refuses it; records the calls made."""

    def __init__(self, state: str, after_cancel: str = "CANCELLED", refuse: bool = False):
        self.state, self.after_cancel, self.refuse = state, after_cancel, refuse
        self.calls: list[str] = []

    def reader(self, authorization: str | None) -> str:
        return "caller"

    def model_names(self, modality: str) -> list[str]:
        return ["wan-tiny"]

    async def job(self, job_id: str, caller: str) -> dict[str, Any]:
        self.calls.append("job")
        return {"job_id": job_id, "model": "wan-tiny", "state": self.state}

    async def cancel(self, job_id: str, caller: str) -> dict[str, Any]:
        self.calls.append("cancel")
        return {"job_id": job_id, "model": "wan-tiny", "state": self.after_cancel}

    async def delete(self, job_id: str, caller: str) -> dict[str, Any]:
        self.calls.append("delete")
        if self.refuse:
            raise FailedPrecondition(f"job_id: job {job_id!r} is RUNNING; cancel it first")
        return {"job_id": job_id, "state": self.state, "result_bytes": 7, "deleted": True}


def delete_video(plane: FakePlane) -> Any:
    app = FastAPI()
    errors.install(app)
    app.include_router(openai_videos.router)
    app.state.context = HttpContext(plane, lambda: True, 1024)  # type: ignore[arg-type]
    return TestClient(app).delete(f"/v1/videos/{VIDEO}")


DELETED = {"id": VIDEO, "object": "video.deleted", "deleted": True}


@pytest.mark.parametrize(
    ("state", "after_cancel", "calls"),
    [
        ("RUNNING", "CANCELLED", ["job", "cancel"]),
        ("QUEUED", "SUCCEEDED", ["job", "cancel", "delete"]),  # it ended meanwhile
        ("RUNNING", "FAILED", ["job", "cancel", "delete"]),
        ("SUCCEEDED", "SUCCEEDED", ["job", "delete"]),
        ("CANCELLED", "CANCELLED", ["job", "delete"]),  # cancelled by an earlier DELETE
    ],
)
def test_cancel_or_delete_by_state(state: str, after_cancel: str, calls: list[str]) -> None:
    plane = FakePlane(state, after_cancel)
    answer = delete_video(plane)
    assert answer.status_code == 200, answer.text
    assert answer.json() == DELETED
    assert plane.calls == calls


def test_a_refused_delete_is_a_409_naming_video_id() -> None:
    answer = delete_video(FakePlane("SUCCEEDED", refuse=True))
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["param"]) == ("FAILED_PRECONDITION", "video_id")
    assert error["message"].startswith("video_id: ") and "cancel it first" in error["message"]
