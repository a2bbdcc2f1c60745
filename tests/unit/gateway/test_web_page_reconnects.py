"""The web page keeps following a job through a gateway that answers "not now" (503, 429),
backing off as the SDK does and waiting out Retry-After, shows that it is reconnecting, and
fetches its own job's result by the gateway's path whatever host the result URL names.

The page's script runs in Node (web_page_harness.js) against scripted answers: a browser
is not needed to decide when to reconnect, and Node is quicker to start than Chromium.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mediamesh.gateway.web import page

HARNESS = Path(__file__).with_name("web_page_harness.js")
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")
UNAVAILABLE = {"code": "UNAVAILABLE", "message": "the scheduler is unreachable; retry"}


def stream(*frames: str) -> dict:
    headers = {"Content-Type": "text/event-stream"}
    return {"status": 200, "headers": headers, "body": "".join(frames)}


def frame(event_id: str, name: str, data: dict) -> str:
    return f"id: {event_id}\nevent: {name}\ndata: {json.dumps(data)}\n\n"


def refused(status: int, retry_after: str | None = None, body: dict = UNAVAILABLE) -> dict:
    headers = {"Content-Type": "application/json"}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return {"status": status, "headers": headers, "body": json.dumps(body)}


QUEUED = frame("0.0.0", "queued", {"kind": "queued", "state": "QUEUED", "position": 1})


def result(url: str, expires: int | None = None) -> str:
    data = {
        "kind": "result",
        "state": "SUCCEEDED",
        "mime_type": "image/png",
        "seed": "1",
        "size_bytes": 3,
        "url": url,
        "url_expires_unix_ms": expires,
    }
    return frame("end", "result", data)


def run_harness(tmp_path: Path, scenario: dict) -> dict:
    """What the page's script did in Node (web_page_harness.js) given `scenario`."""
    app = tmp_path / "app.js"
    app.write_bytes(page.read_static("app.js"))
    done = subprocess.run(
        [str(NODE), str(HARNESS), str(app), json.dumps(scenario)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def run_page(answers: list[dict], tmp_path: Path) -> dict:
    return run_harness(tmp_path, {"answers": answers})


def test_it_reconnects_through_503_and_429_backing_off_and_waiting_out_retry_after(tmp_path):
    seen = run_page(
        [
            stream("retry: 1000\n\n", QUEUED),  # then the stream drops
            refused(503, retry_after="7"),
            refused(429),
            stream(result("http://127.0.0.1:8080/v1/jobs/j1/result")),
            {"status": 200, "headers": {"Content-Type": "image/png"}, "body": "png"},
        ],
        tmp_path,
    )
    # The stream's retry at first, then Retry-After in full, then the doubled backoff.
    assert [wait["ms"] for wait in seen["waits"]] == [1000, 7000, 4000]
    assert {wait["connection"] for wait in seen["waits"]} == {"reconnecting"}
    assert "try 2 of 5" in seen["waits"][1]["text"] and "UNAVAILABLE" in seen["waits"][1]["text"]
    resumed = [r["headers"].get("Last-Event-ID") for r in seen["requests"][1:4]]
    assert resumed == ["0.0.0"] * 3
    assert seen["connection"] == {"state": "connected", "hidden": True}
    assert seen["error"] is None and seen["state"] == "SUCCEEDED"


def test_it_gives_up_after_max_reconnects_naming_the_last_problem(tmp_path):
    seen = run_page([refused(503, retry_after="1")] * 6, tmp_path)
    assert [wait["ms"] for wait in seen["waits"]] == [1000, 2000, 4000, 8000, 16000]
    assert len(seen["requests"]) == 6
    assert seen["error"].startswith("UNAVAILABLE: lost the job's event stream")
    assert "the scheduler is unreachable" in seen["error"]
    assert seen["connection"]["hidden"] is True


def test_a_refusal_that_waiting_cannot_lift_ends_following_at_once(tmp_path):
    gone = {"code": "NOT_FOUND", "message": "job_id: no job 'j1'"}
    seen = run_page([refused(404, body=gone)], tmp_path)
    assert seen["waits"] == [] and seen["error"] == "NOT_FOUND: job_id: no job 'j1'"


def test_its_own_result_is_fetched_by_path_whatever_host_the_url_names(tmp_path):
    # The URL names the host the gateway was asked under (a proxy's inside name, or a forged
    # Host): the page still fetches the bytes from the gateway that served it, with its key.
    seen = run_page(
        [
            stream(result("http://evil.example/v1/jobs/j1/result")),
            {"status": 200, "headers": {"Content-Type": "image/png"}, "body": "png"},
        ],
        tmp_path,
    )
    assert [r["url"] for r in seen["requests"]] == ["/v1/jobs/j1/events", "/v1/jobs/j1/result"]
    assert seen["download"].startswith("blob:")


def test_a_presigned_result_url_is_shown_as_it_is(tmp_path):
    presigned = "https://bucket.example/results/j1.png?X-Amz-Signature=abc"
    seen = run_page([stream(result(presigned, expires=1_900_000_000_000))], tmp_path)
    assert [r["url"] for r in seen["requests"]] == ["/v1/jobs/j1/events"]
    assert seen["download"] == presigned


def test_its_own_result_is_fetched_again_after_a_dropped_connection(tmp_path):
    # The gateway stopped between the result event and the fetch, then came back.
    seen = run_page(
        [
            stream(result("/v1/jobs/j1/result")),
            {"network_error": "Failed to fetch"},
            refused(503, retry_after="2"),
            {"status": 200, "headers": {"Content-Type": "image/png"}, "body": "png"},
        ],
        tmp_path,
    )
    assert [r["url"] for r in seen["requests"]][1:] == ["/v1/jobs/j1/result"] * 3
    assert [wait["ms"] for wait in seen["waits"]] == [1000, 2000]
    assert seen["download"].startswith("blob:")
    assert seen["connection"]["hidden"] is True


def test_a_result_that_cannot_be_fetched_says_so_and_how_to_look_again(tmp_path):
    seen = run_page(
        [stream(result("/v1/jobs/j1/result")), *[{"network_error": "Failed to fetch"}] * 6],
        tmp_path,
    )
    assert len(seen["requests"]) == 7
    assert seen["error"].startswith("UNAVAILABLE: could not fetch the result (the gateway")
    assert seen["error"].endswith("pick the job in the list to look again")
