"""The page checks an API key where it is entered: a header value must be ISO-8859-1 (fetch()
throws a TypeError otherwise), and API keys are visible ASCII, so anything else is refused
next to the key box and never sent, rather than reported as the gateway being unreachable.

The page's script runs in Node (web_page_harness.js) against scripted answers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.gateway.test_web_page_reconnects import NODE, run_harness

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")
MODELS = {"status": 200, "body": json.dumps({"object": "list", "data": []})}
JOBS = {"status": 200, "body": json.dumps({"data": [], "has_more": False})}


def enter_key(key: str) -> str:
    return f"""(async () => {{
  setupKey();
  $('api-key').value = {json.dumps(key)};
  $('key-form').dispatch('submit');
  await new Promise((resolve) => setTimeout(resolve, 20));
  return $('api-key').attributes['aria-invalid'];
}})()"""


@pytest.mark.parametrize("key", ["webkey-\u2713", "web key", "caf\u00e9"])
def test_a_key_outside_visible_ascii_is_refused_by_the_key_box_and_never_sent(
    tmp_path: Path, key: str
) -> None:
    seen = run_harness(
        tmp_path,
        {"answers": [MODELS, JOBS], "run": enter_key(key), "report": ["key-status"]},
    )
    status = seen["elements"]["key-status"]["text"]
    assert status.startswith("Not used: an API key has only visible ASCII characters"), status
    assert seen["value"] == "true"
    assert seen["requests"] == [] and "mediamesh.apiKey" not in seen["store"]


def test_a_visible_ascii_key_is_used(tmp_path: Path) -> None:
    seen = run_harness(
        tmp_path,
        {"answers": [MODELS, JOBS], "run": enter_key("webkey-ok"), "report": ["key-status"]},
    )
    assert seen["elements"]["key-status"]["text"] == "Key in use for this session."
    assert seen["value"] == "false" and seen["store"]["mediamesh.apiKey"] == "webkey-ok"
    sent = {r["headers"].get("Authorization") for r in seen["requests"]}
    assert sent == {"Bearer webkey-ok"}


def test_a_stored_key_that_cannot_be_sent_is_dropped_and_said_so(tmp_path: Path) -> None:
    seen = run_harness(
        tmp_path,
        {
            "answers": [MODELS],
            "store": {"mediamesh.apiKey": "webkey-\u2713"},
            "run": "(async () => { setupKey(); return await loadModels(); })()",
            "report": ["key-status"],
        },
    )
    assert seen["elements"]["key-status"]["text"].startswith("Not used:")
    assert "mediamesh.apiKey" not in seen["store"]
    assert [r["headers"].get("Authorization") for r in seen["requests"]] == [None]
