"""GatewayError names the refused field and the job; `mediamesh` exports it, lazily."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ("steps: must be a whole number from 0 to 4294967295, got -3", "steps"),
        ("image_id: no upload 'u-1'", "image_id"),
        ("adapters[0].scale: 9.0 is out of range; allowed 0.0..2.0", "adapters[0].scale"),
        ("adapters[1].name: no adapter 'x' for model 'flux-tiny'", "adapters[1].name"),
        ("webhook.events[0]: 'done' is not an event", "webhook.events[0]"),
        ("webhook.url: https:// is required", "webhook.url"),
        ("adapters[0: unclosed", None),
        ("adapters[x].scale: not an index", None),
        ("adapters]0[: backwards", None),
        ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:9", None),
        ("the event stream of job 'j-1' ended before the job", None),
        ("Stream removed", None),
        ("", None),
    ],
)
def test_field_is_what_the_message_names(message: str, field: str | None) -> None:
    from mediamesh.sdk import GatewayError

    assert GatewayError("INVALID_ARGUMENT", message).field == field


def test_the_job_id_is_in_the_text_and_the_error_pickles() -> None:
    from mediamesh.sdk import GatewayError

    error = GatewayError("UNAVAILABLE", "Stream removed", 1.5, job_id="j-9")
    assert str(error) == "UNAVAILABLE: Stream removed (job j-9)"
    assert str(GatewayError("UNAVAILABLE", "job 'j-9' lost", job_id="j-9")).count("j-9") == 1
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.code, copy.message, copy.retry_after_s, copy.job_id, copy.field) == (
        "UNAVAILABLE",
        "Stream removed",
        1.5,
        "j-9",
        None,
    )


def test_mediamesh_exports_the_error_and_events_without_importing_grpc_first() -> None:
    code = (
        "import sys, mediamesh\n"
        "assert 'grpc' not in sys.modules, 'import mediamesh loaded grpc'\n"
        "from mediamesh import (AsyncClient, Client, Error, Event, EventLoopError,\n"
        "    GatewayError, Notice, Progress, Queued, Result)\n"
        "import mediamesh.sdk as sdk\n"
        "assert GatewayError is sdk.GatewayError and Result is sdk.Result\n"
        "assert issubclass(EventLoopError, RuntimeError)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
