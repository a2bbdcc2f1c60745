"""What the web page shows, and leaves off, as keys, jobs and fields change: nothing of one
tenant's or one job's stays on screen for the next, a field the model cannot use with the
values chosen is not offered, a result on another origin opens beside the page, and screen
readers hear what changed.

The page's script runs in Node (web_page_harness.js) against scripted answers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.gateway.test_web_page_reconnects import NODE, refused, result, run_harness, stream

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")
GONE = {"code": "NOT_FOUND", "message": "job_id: no job 'gone'"}
NO_KEY = {"code": "UNAUTHENTICATED", "message": "authorization: a Bearer API key is required"}
IMAGE_MODEL = {
    "name": "m",
    "modality": "image",
    "mime_type": "image/png",
    "accepted_fields": ["prompt", "steps"],
    "output_formats": ["png", "jpeg", "webp"],
    "limits": {"max_steps": 8, "default_steps": 1},
    "inputs": [],
}
JOBS = [{"job_id": "j0", "model": "m", "prompt": "a fox", "state": "SUCCEEDED"}]


def run_page(tmp_path: Path, run: str | None = None, **scenario: object) -> dict:
    if run is not None:
        scenario["run"] = run
    return run_harness(tmp_path, {"answers": [], **scenario})


def with_model(script: str, model: dict = IMAGE_MODEL) -> str:
    """`script` run in an async function once the page lists `model` and shows its fields."""
    return (
        f"(async () => {{ models = [{json.dumps(model)}]; $('model').add(new Option('m', 'm'));"
        f" renderFields(); {script} }})()"
    )


def test_a_job_that_cannot_be_opened_shows_no_state_of_the_last_one(tmp_path: Path) -> None:
    seen = run_page(
        tmp_path,
        "resetJobView('j0'); setState('RUNNING'); showJob('gone')",
        answers=[refused(404, body=GONE)],
        report=["job-id", "job-state", "cancel"],
    )
    shown = seen["elements"]
    assert shown["job-id"]["text"] == "gone"
    assert shown["job-state"]["text"] == "" and shown["job-state"]["dataset"]["state"] == ""
    assert shown["cancel"]["disabled"] is True
    assert seen["error"] == "NOT_FOUND: job_id: no job 'gone'"


QUALITY = """
  const quality = () => {
    const input = $('f-output_quality');
    return {disabled: input.disabled, hidden: input.closest('.field').hidden};
  };
  const sent = () => JSON.parse(requestBody(selectedModel()).body);
  const format = $('f-output_format');
  $('f-output_quality').value = '80';
  const png = {...quality(), sent: sent()};
  format.value = 'jpeg'; format.dispatch('change');
  const jpeg = {...quality(), sent: sent()};
  format.value = 'png'; format.dispatch('change');
  return {png, jpeg, back: {...quality(), sent: sent()}};
"""


def test_quality_is_offered_and_sent_only_for_jpeg_and_webp(tmp_path: Path) -> None:
    value = run_page(tmp_path, with_model(QUALITY))["value"]
    assert value["png"]["disabled"] is True and value["png"]["hidden"] is True
    assert "output_quality" not in value["png"]["sent"]
    assert value["jpeg"]["disabled"] is False and value["jpeg"]["hidden"] is False
    assert value["jpeg"]["sent"]["output_quality"] == 80
    assert value["jpeg"]["sent"]["output_format"] == "jpeg"
    assert value["back"]["disabled"] is True and "output_quality" not in value["back"]["sent"]


def test_quality_follows_the_default_format_of_a_model_without_a_choice(tmp_path: Path) -> None:
    jpeg_only = {**IMAGE_MODEL, "mime_type": "image/jpeg", "output_formats": ["jpeg"]}
    script = "return [$('f-output_format'), $('f-output_quality').disabled];"
    assert run_page(tmp_path, with_model(script, jpeg_only))["value"] == [None, False]


FORGET = """
  setupKey();
  renderJobs();
  resetJobView('j0');
  current.blobUrl = 'blob:http://page.example/j0';
  const stream = current.abort.signal;
  $('forget-key').dispatch('click');
  return {aborted: stream.aborted, current, models: models.length,
          options: $('model').options.length, fields: $('fields').children.length};
"""


def test_forgetting_the_key_takes_the_tenants_job_models_and_list_off_the_page(
    tmp_path: Path,
) -> None:
    seen = run_page(
        tmp_path,
        with_model(FORGET),
        store={"mediamesh.apiKey": "k", "mediamesh.jobs": json.dumps(JOBS)},
        report=["job", "jobs", "jobs-empty", "key-status", "result-media", "model-info"],
    )
    value, shown = seen["value"], seen["elements"]
    assert value["aborted"] is True and value["current"] is None
    assert value["models"] == 0 and value["fields"] == 0
    assert seen["revoked"] == ["blob:http://page.example/j0"]
    assert shown["job"]["hidden"] is True and shown["result-media"]["children"] == 0
    assert shown["jobs"]["children"] == 0 and shown["jobs-empty"]["hidden"] is False
    assert shown["model-info"]["text"] == ""
    assert shown["key-status"]["text"] == "Key forgotten."
    assert "mediamesh.apiKey" not in seen["store"] and "mediamesh.jobs" not in seen["store"]


REFUSED = "renderJobs(); await loadModels(); await loadJobs(); return models.length;"


def test_a_refused_key_is_said_so_and_lists_nothing_of_the_last_tenant(tmp_path: Path) -> None:
    seen = run_page(
        tmp_path,
        with_model(REFUSED),
        answers=[refused(401, body=NO_KEY), refused(401, body=NO_KEY)],
        store={"mediamesh.apiKey": "wrong", "mediamesh.jobs": json.dumps(JOBS)},
        report=["key-status", "jobs", "model"],
    )
    assert seen["elements"]["key-status"]["text"] == "The key was refused."
    assert seen["value"] == 0 and seen["elements"]["model"]["children"] == 0
    assert seen["elements"]["jobs"]["children"] == 0 and "mediamesh.jobs" not in seen["store"]


def test_without_a_key_a_401_asks_for_one(tmp_path: Path) -> None:
    seen = run_page(
        tmp_path,
        with_model(REFUSED),
        answers=[refused(401, body=NO_KEY), refused(401, body=NO_KEY)],
        report=["key-status"],
    )
    assert seen["elements"]["key-status"]["text"] == "This mesh needs an API key."


def test_a_result_on_another_origin_opens_beside_the_page(tmp_path: Path) -> None:
    presigned = "https://bucket.example/results/j1.png?X-Amz-Signature=abc"
    seen = run_page(
        tmp_path,
        answers=[stream(result(presigned, expires=1_900_000_000_000))],
        report=["download"],
    )
    link = seen["elements"]["download"]
    assert link["href"] == presigned and link["target"] == "_blank"
    assert "noopener" in link["rel"].split()


def test_its_own_result_downloads_in_place_under_the_gateways_file_name(tmp_path: Path) -> None:
    served = {
        "status": 200,
        "headers": {
            "Content-Type": "image/png",
            "Content-Disposition": 'inline; filename="j1.png"',
        },
        "body": "png",
    }
    seen = run_page(
        tmp_path,
        answers=[stream(result("http://127.0.0.1:8080/v1/jobs/j1/result")), served],
        report=["download"],
    )
    link = seen["elements"]["download"]
    assert link["href"].startswith("blob:") and link["target"] == ""
    assert link["download"] == "j1.png"


def test_a_video_result_has_an_accessible_name(tmp_path: Path) -> None:
    frame = result("http://127.0.0.1:8080/v1/jobs/j1/result").replace("image/png", "video/mp4")
    served = {"status": 200, "headers": {"Content-Type": "video/mp4"}, "body": "mp4"}
    seen = run_page(tmp_path, answers=[stream(frame), served], report=["result-element"])
    shown = seen["elements"]["result-element"]
    assert shown["attributes"]["aria-label"] == "Result of job j1"
    assert seen["download"].startswith("blob:")


ANNOUNCED = """
  resetJobView('j1');
  const heard = [];
  for (const state of ['QUEUED', 'QUEUED', 'RUNNING', 'RUNNING', 'SUCCEEDED']) {
    $('job-announce').textContent = '';
    setState(state);
    heard.push($('job-announce').textContent);
  }
  return heard;
"""


def test_screen_readers_hear_state_changes_only(tmp_path: Path) -> None:
    heard = run_page(tmp_path, f"(() => {{ {ANNOUNCED} }})()")["value"]
    assert heard == ["Job queued.", "", "Job running.", "", "Job succeeded."]


FIELD_ERROR = """
  showFormError(new ApiError(400, 'INVALID_ARGUMENT', 'steps: 50 is out of range; allowed 1..8'));
  const during = $('f-steps').getAttribute('aria-describedby');
  clearFormError();
  return [during, $('f-steps').getAttribute('aria-describedby')];
"""


def test_a_field_at_fault_is_described_by_the_error(tmp_path: Path) -> None:
    during, after = run_page(tmp_path, with_model(FIELD_ERROR))["value"]
    assert during == "f-steps-hint form-error" and after == "f-steps-hint"


CANCELLED = """
  resetJobView('j1');
  setState('RUNNING');
  current.progressStart = {step: 1, at: performance.now() - 2000};
  showProgress(3, 50, estimate(current, 3, 50));
  const running = $('progress-text').textContent;
  setState('CANCELLED');
  return [running, $('progress-text').textContent];
"""


def test_a_cancelled_job_counts_no_time_down(tmp_path: Path) -> None:
    running, cancelled = run_page(tmp_path, f"(() => {{ {CANCELLED} }})()")["value"]
    assert running.startswith("Step 3 of 50 · about ")
    assert cancelled == "Stopped at step 3 of 50."


VIDEO_MODEL = {
    "name": "m",
    "modality": "video",
    "mime_type": "video/mp4",
    "accepted_fields": ["prompt", "num_frames"],
    "output_formats": ["mp4"],
    "limits": {"max_num_frames": 33, "default_num_frames": 9, "frame_multiple": 4},
    "inputs": ["image"],
}
HINTS = """
  const hint = (name) => $(`f-${name}-hint`).textContent;
  return {frames: hint('num_frames'), step: $('f-num_frames').step, image: hint('image')};
"""


def test_frame_multiple_and_input_pixels_are_hinted(tmp_path: Path) -> None:
    model = {**VIDEO_MODEL, "limits": {**VIDEO_MODEL["limits"], "max_input_pixels": 262144}}
    value = run_page(tmp_path, with_model(HINTS, model))["value"]
    assert value["frames"] == "default 9, up to 33, 1 more than a multiple of 4"
    assert value["step"] == "4"
    assert value["image"] == "up to 512 \u00d7 512 pixels"


DELETED = {"job_id": "j0", "state": "SUCCEEDED", "result_bytes": 3, "deleted": True}
RUNNING = {"code": "FAILED_PRECONDITION", "message": "job_id: job 'j0' is RUNNING; cancel it"}


def ok(body: dict) -> dict:
    headers = {"Content-Type": "application/json"}
    return {"status": 200, "headers": headers, "body": json.dumps(body)}


def test_an_ended_job_is_deleted_and_leaves_the_page_and_its_list(tmp_path: Path) -> None:
    seen = run_page(
        tmp_path,
        "(async () => { resetJobView('j0'); const before = $('delete').disabled;"
        " setState('SUCCEEDED'); const ended = $('delete').disabled;"
        " await deleteJob(); return [before, ended]; })()",
        answers=[ok(DELETED)],
        store={"mediamesh.jobs": json.dumps(JOBS)},
        report=["job", "jobs-announce"],
    )
    assert seen["value"] == [True, False]  # offered only once the job has ended
    assert [(r["method"], r["url"]) for r in seen["requests"]] == [("DELETE", "/v1/jobs/j0/record")]
    assert json.loads(seen["store"]["mediamesh.jobs"]) == []
    assert seen["elements"]["job"]["hidden"] is True
    assert seen["elements"]["jobs-announce"]["text"] == "Job j0 deleted."


def test_a_refused_delete_is_said_and_the_job_stays(tmp_path: Path) -> None:
    seen = run_page(
        tmp_path,
        "(async () => { resetJobView('j0'); setState('SUCCEEDED'); await deleteJob(); })()",
        answers=[refused(409, body=RUNNING)],
        store={"mediamesh.jobs": json.dumps(JOBS)},
        report=["job", "delete"],
    )
    assert seen["error"] == f"FAILED_PRECONDITION: {RUNNING['message']}"
    assert seen["elements"]["job"]["hidden"] is False
    assert seen["elements"]["delete"]["disabled"] is False
    assert json.loads(seen["store"]["mediamesh.jobs"]) == JOBS
