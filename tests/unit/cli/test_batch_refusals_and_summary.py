"""How `mediamesh batch` takes refusals and reports: a line's own timeout_ms refused at
admission is recorded at once (no retry can pass it), a deadline of the call is retried;
the failures are listed in line order; --concurrency out of range is refused by name."""

from __future__ import annotations

import time

import pytest

from mediamesh.cli.batch_command import FAILURES_SHOWN
from mediamesh.sdk import GatewayError

from .batch_fakes import FakeMesh, rows, run_batch, write_lines

# What the scheduler answers a timeout_ms shorter than the job itself.
TOO_SHORT = GatewayError(
    "DEADLINE_EXCEEDED",
    "timeout_ms: 0.001 s left, and this job needs at least 0.180 s on a free device; "
    "give it more time",
)


def refusals(prompt: str, attempt: int) -> GatewayError | None:
    if prompt == "short":
        return TOO_SHORT
    if prompt == "older scheduler":
        return GatewayError("DEADLINE_EXCEEDED", "timeout: 0.001 s left, and this job needs")
    if prompt == "slow answer" and attempt == 1:
        return GatewayError("DEADLINE_EXCEEDED", "Deadline Exceeded")  # the call's own
    return None


def test_a_refusal_of_the_lines_own_timeout_is_recorded_at_once(tmp_path, monkeypatch, capsys):
    mesh = FakeMesh(refusals)
    prompts = write_lines(
        tmp_path / "prompts.jsonl",
        {"prompt": "ok"},
        {"prompt": "short", "timeout_ms": 1},
        {"prompt": "older scheduler", "timeout_ms": 1},
        {"prompt": "slow answer"},
    )
    out = tmp_path / "out"
    started = time.monotonic()
    assert run_batch(monkeypatch, mesh, prompts, out) == 1
    assert time.monotonic() - started < 5  # a retried line would back off for 35 s
    assert mesh.attempts == {"ok": 1, "short": 1, "older scheduler": 1, "slow answer": 2}
    by_line = {row["line"]: row for row in rows(out)}
    assert by_line[2]["state"] == "REJECTED"
    assert by_line[2]["error"] == f"DEADLINE_EXCEEDED: {TOO_SHORT.message}"
    assert by_line[4]["state"] == "SUCCEEDED"
    err = capsys.readouterr().err
    assert f"line 2: REJECTED DEADLINE_EXCEEDED {TOO_SHORT.message}" in err


def test_failures_are_listed_in_line_order_with_how_many_more(tmp_path, monkeypatch, capsys):
    count = FAILURES_SHOWN + 5
    # Later lines end first.
    mesh = FakeMesh(delays={f"fail {i}": (count - i) * 0.01 for i in range(count)})
    prompts = write_lines(
        tmp_path / "prompts.jsonl", *({"prompt": f"fail {i}"} for i in range(count))
    )
    assert run_batch(monkeypatch, mesh, prompts, tmp_path / "out", "--concurrency", "8") == 1
    listed = capsys.readouterr().err.splitlines()
    assert [text.split(":")[0] for text in listed[:FAILURES_SHOWN]] == [
        f"line {n}" for n in range(1, FAILURES_SHOWN + 1)
    ]
    assert listed[FAILURES_SHOWN] == "and 5 more failed lines"


@pytest.mark.parametrize("value", ["-5", "0", "1025", "many"])
def test_concurrency_out_of_range_is_refused_naming_the_flag(tmp_path, monkeypatch, capsys, value):
    mesh = FakeMesh()
    prompts = write_lines(tmp_path / "prompts.jsonl", {"prompt": "a"})
    with pytest.raises(SystemExit) as caught:
        run_batch(monkeypatch, mesh, prompts, tmp_path / "out", "--concurrency", value)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --concurrency: must be a whole number from 1 to 1024, got '{value}'" in err
    assert mesh.submits == [] and not (tmp_path / "out").exists()


def test_a_tenant_at_its_result_quota_stops_the_run_naming_it(tmp_path, monkeypatch, capsys):
    full = GatewayError(
        "RESOURCE_EXHAUSTED",
        "result_quota_bytes: tenant 'a' holds 1200 bytes of results, at or over its quota of "
        "1000; delete results it no longer needs",
    )
    mesh = FakeMesh(lambda prompt, attempt: full if prompt == "over" else None)
    prompts = write_lines(tmp_path / "prompts.jsonl", {"prompt": "ok"}, {"prompt": "over"})
    started = time.monotonic()
    assert run_batch(monkeypatch, mesh, prompts, tmp_path / "out") == 2
    assert time.monotonic() - started < 5
    assert mesh.attempts["over"] == 1
    assert f"mediamesh batch: RESOURCE_EXHAUSTED: {full.message}" in capsys.readouterr().err
