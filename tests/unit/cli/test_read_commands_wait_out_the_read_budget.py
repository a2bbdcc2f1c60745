"""`mediamesh jobs`, `watch`, `cancel` and `delete` wait out the read budget as the gateway
asks (a batch of the same tenant may be spending it), within bounds; `cancel` of a job that
had already ended exits 1, as documented, and so does `delete` of one that has not; a refused
listing names the flag it came from."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mediamesh.cli import job_commands
from mediamesh.cli.main import main as cli_main
from mediamesh.sdk import (
    DeletedJob,
    Event,
    GatewayError,
    JobInfo,
    JobPage,
    JobState,
    Queued,
    Result,
)
from tests.unit.cli.fake_client import ClientStandIn

JOB = "0123456789abcdef0123456789abcdef"


def over_budget() -> GatewayError:
    return GatewayError(
        "RESOURCE_EXHAUSTED", "read rate: tenant 'a' is over 5 reads per second", 0.01
    )


def info(state: JobState) -> JobInfo:
    return JobInfo(
        job_id=JOB, model="echo", state=state, priority=None, tenant="a", created_unix_ms=0,
        finished_unix_ms=0, attempts=1, step=0, total_steps=4, seed=1, worker_id="",
    )  # fmt: skip


class FakeClient(ClientStandIn):
    """Refuses each call's first `refusals` tries over the read budget; records the calls."""

    refusals = 2
    state = JobState.QUEUED
    calls: list[str] = []

    def __init__(self, *_args: object, **_options: object) -> None:
        self.tries: dict[str, int] = {}

    def _call(self, name: str) -> None:
        FakeClient.calls.append(name)
        self.tries[name] = self.tries.get(name, 0) + 1
        if self.tries[name] <= self.refusals:
            raise over_budget()

    def list_jobs(self, **query: object) -> JobPage:
        self._call("list_jobs")
        if query["after"] == "no-such-job":
            raise GatewayError(
                "INVALID_ARGUMENT",
                "after_job_id: no job 'no-such-job' (it may have been forgotten when its "
                "result's retention ended); start the listing again without it",
            )
        return JobPage(jobs=[info(JobState.SUCCEEDED)], has_more=False)

    def get(self, job_id: str) -> JobInfo:
        self._call("get")
        return info(FakeClient.state)

    def cancel(self, job_id: str) -> JobInfo:
        self._call("cancel")
        return info(JobState.CANCELLED)

    def delete_job(self, job_id: str) -> DeletedJob:
        self._call("delete_job")
        if not FakeClient.state.terminal:
            raise GatewayError(
                "FAILED_PRECONDITION",
                f"job_id: job {job_id!r} is {FakeClient.state} and only an ended job can be "
                "deleted; cancel it first",
            )
        return DeletedJob(job_id=job_id, state=FakeClient.state, result_bytes=1234)

    def watch(self, job_id: str) -> Iterator[Event]:
        FakeClient.calls.append("watch")
        self.tries["watch"] = self.tries.get("watch", 0) + 1
        if self.tries["watch"] <= self.refusals:

            def refused() -> Iterator[Event]:
                raise over_budget()
                yield  # a generator, as the SDK's watch is: refused at the first event

            return refused()
        return iter(
            [
                Queued(job_id=JOB, state=JobState.QUEUED, position=0, eta_s=0.1, queue="image"),
                Result(
                    job_id=JOB, state=JobState.SUCCEEDED, data=b"png", mime_type="image/png", seed=1
                ),
            ]
        )


@pytest.fixture(autouse=True)
def fake_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mediamesh.sdk.Client", FakeClient)
    FakeClient.refusals, FakeClient.state, FakeClient.calls = 2, JobState.QUEUED, []


def test_jobs_waits_out_the_read_budget(capsys) -> None:
    assert cli_main(["jobs"]) == 0
    assert FakeClient.calls == ["list_jobs"] * 3
    assert JOB in capsys.readouterr().out


def test_the_wait_is_bounded(capsys) -> None:
    FakeClient.refusals = 100
    assert cli_main(["jobs"]) == 1
    assert len(FakeClient.calls) == job_commands.READ_ATTEMPTS
    assert "RESOURCE_EXHAUSTED: read rate" in capsys.readouterr().err
    # Nor longer than MAX_READ_WAIT_S in all, whatever the hint says.
    late = GatewayError("RESOURCE_EXHAUSTED", "slow down", job_commands.MAX_READ_WAIT_S + 1)
    assert job_commands.over_budget_wait(late, 1, 0.0) is None
    assert job_commands.over_budget_wait(GatewayError("UNAVAILABLE", "down"), 1, 0.0) is None


def test_watch_waits_out_the_read_budget(tmp_path, capsys) -> None:
    assert cli_main(["watch", JOB, "--out", str(tmp_path / "r"), "--quiet"]) == 0
    assert FakeClient.calls == ["watch"] * 3
    assert (tmp_path / "r.png").read_bytes() == b"png"


def test_cancel_cancels_a_job_that_has_not_ended(capsys) -> None:
    assert cli_main(["cancel", JOB]) == 0
    assert FakeClient.calls == ["get"] * 3 + ["cancel"] * 3
    assert capsys.readouterr().out == f"job {JOB} CANCELLED\n"


@pytest.mark.parametrize("state", [JobState.CANCELLED, JobState.SUCCEEDED])
def test_cancel_of_a_job_that_had_already_ended_exits_1(capsys, state) -> None:
    FakeClient.refusals, FakeClient.state = 0, state
    assert cli_main(["cancel", JOB]) == 1
    assert FakeClient.calls == ["get"]  # nothing to cancel
    out, err = capsys.readouterr()
    assert out == f"job {JOB} {state}\n"
    assert err == f"mediamesh: job {JOB} had already ended; nothing changed\n"


def test_delete_waits_out_the_read_budget_and_says_what_went(capsys) -> None:
    FakeClient.state = JobState.SUCCEEDED
    assert cli_main(["delete", JOB]) == 0
    assert FakeClient.calls == ["delete_job"] * 3
    assert capsys.readouterr().out == f"job {JOB} deleted (SUCCEEDED, 1234 bytes of result)\n"


def test_delete_of_a_job_that_has_not_ended_exits_1_saying_to_cancel_it(capsys) -> None:
    FakeClient.refusals = 0
    assert cli_main(["delete", JOB]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("mediamesh: FAILED_PRECONDITION: job_id: ") and "cancel it first" in err


def test_an_unknown_after_names_the_flag(capsys) -> None:
    FakeClient.refusals = 0
    assert cli_main(["jobs", "--after", "no-such-job"]) == 1
    assert capsys.readouterr().err.startswith(
        "mediamesh: --after: INVALID_ARGUMENT: after_job_id: no job 'no-such-job'"
    )
