"""`mediamesh batch` run again: bad values, failed jobs, edited files and other files."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mediamesh.cli.batch_manifest import folder_lock
from mediamesh.cli.main import main as cli_main
from mediamesh.common.work import JobParams
from mediamesh.worker.core import call_hooks
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, NO_SPOT_WAIT, keyed
from tests.service.gateway.test_batch_command import manifest_rows


@pytest.fixture
async def echo_mesh(tmp_path: Path, models_dir: Path) -> AsyncIterator[InProcessMesh]:
    mesh = await start_mesh(
        tmp_path, models_dir, [["echo"]], gateway=keyed(), scheduler=NO_SPOT_WAIT
    )
    yield mesh
    await stop_mesh(mesh)


async def batch(mesh: InProcessMesh, capsys, prompts: Path, out: Path, *extra: str):
    """Exit code, stdout and stderr of `mediamesh batch`, run in this process."""
    argv = ["batch", str(prompts), "--out", str(out), "--model", "echo", "--quiet"]
    argv += ["--gateway", f"127.0.0.1:{mesh.gateway.port}", "--api-key", KEY_A, *extra]
    code = await asyncio.to_thread(cli_main, argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_lines(path: Path, *lines: dict | str) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


async def test_a_value_no_request_may_carry_rejects_its_line_and_the_others_run(
    tmp_path, echo_mesh, capsys
):
    prompts = write_lines(
        tmp_path / "prompts.jsonl",
        {"prompt": "good", "seed": 1},
        {"prompt": "x", "steps": -3},
        {"prompt": "x", "seed": -1},
        {"prompt": "x", "timeout_ms": -5},
        {"prompt": "x", "steps": 99999999999},
        {"prompt": "also good", "seed": 2},
    )
    code, stdout, stderr = await batch(echo_mesh, capsys, prompts, tmp_path / "out")
    assert code == 1 and "2 succeeded, 4 failed" in stdout, stderr
    rows = {row["line"]: row for row in manifest_rows(tmp_path / "out")}
    assert [rows[n]["state"] for n in range(1, 7)] == ["SUCCEEDED"] + ["REJECTED"] * 4 + [
        "SUCCEEDED"
    ]
    assert rows[2]["error"] == (
        "INVALID_ARGUMENT: steps: must be a whole number from 0 to 4294967295, got -3"
    )
    assert rows[3]["error"].startswith("INVALID_ARGUMENT: seed: must be a whole number from 0 to")
    assert "timeout_ms: must be a whole number from 1 to 4294967295, got -5" in rows[4]["error"]
    assert "got 99999999999" in rows[5]["error"]
    assert "line 2: REJECTED INVALID_ARGUMENT steps:" in stderr
    assert len(echo_mesh.core.jobs) == 2  # nothing refused was sent


async def test_a_failed_line_is_retried_under_a_new_key_and_a_done_line_never(
    tmp_path, echo_mesh, capsys
):
    def fail_flaky(jobs: list[JobParams]) -> None:
        if any(job.generation.prompt == "flaky" for job in jobs):
            raise RuntimeError("flaky (test hook)")

    prompts = write_lines(
        tmp_path / "prompts.jsonl", {"prompt": "a"}, {"prompt": "flaky"}, {"prompt": "c"}
    )
    out = tmp_path / "out"
    call_hooks.install("echo", fail_flaky)
    try:
        # One job at a time, so that the flaky one is batched with no other.
        for _ in range(2):
            code, stdout, stderr = await batch(
                echo_mesh, capsys, prompts, out, "--concurrency", "1"
            )
            assert code == 1 and "line 2: FAILED INTERNAL" in stderr, stderr
    finally:
        call_hooks.remove("echo")
    code, stdout, stderr = await batch(echo_mesh, capsys, prompts, out)
    assert code == 0 and "1 succeeded, 0 failed, 2 already done" in stdout, stderr
    code, stdout, _ = await batch(echo_mesh, capsys, prompts, out)
    assert code == 0 and "0 succeeded, 0 failed, 3 already done" in stdout

    rows = manifest_rows(out)
    second = [row for row in rows if row["line"] == 2]
    key = second[0]["key"]
    assert [row["key"] for row in second] == [key, f"{key}:retry1", f"{key}:retry2"]
    assert [row["state"] for row in second] == ["FAILED", "FAILED", "SUCCEEDED"]
    assert len({row["job_id"] for row in second}) == 3  # each try a job of its own
    assert [row["line"] for row in rows].count(1) == 1 and (out / "2.png").exists()
    assert len(echo_mesh.core.jobs) == 5


async def test_editing_or_appending_lines_runs_only_those_lines(tmp_path, echo_mesh, capsys):
    lines = [{"prompt": f"p{i}", "seed": i} for i in range(1, 5)]
    prompts, out = write_lines(tmp_path / "prompts.jsonl", *lines), tmp_path / "out"
    assert (await batch(echo_mesh, capsys, prompts, out))[0] == 0
    first = {row["line"]: row["job_id"] for row in manifest_rows(out)}

    lines[1] = {"prompt": "p2, typo fixed", "seed": 2}
    write_lines(prompts, *lines, {"prompt": "p5", "seed": 5})
    code, stdout, stderr = await batch(echo_mesh, capsys, prompts, out)
    assert code == 0 and "2 succeeded, 0 failed, 3 already done" in stdout, stderr
    assert "1 line(s) changed since their results were written (line 2)" in stderr
    rows = manifest_rows(out)
    assert sorted(row["line"] for row in rows[4:]) == [2, 5]
    assert {row["job_id"] for row in rows[4:]}.isdisjoint(first.values())
    assert len(echo_mesh.core.jobs) == 6

    code, stdout, _ = await batch(echo_mesh, capsys, prompts, out)
    assert code == 0 and "5 already done" in stdout and len(echo_mesh.core.jobs) == 6


async def test_a_folder_of_another_inputs_results_is_refused(tmp_path, echo_mesh, capsys):
    first = write_lines(tmp_path / "a.jsonl", {"prompt": "a1"}, {"prompt": "a2"})
    out = tmp_path / "out"
    assert (await batch(echo_mesh, capsys, first, out))[0] == 0
    results = {path.name: path.read_bytes() for path in out.glob("*.png")}

    other = write_lines(tmp_path / "b.jsonl", {"prompt": "b1"}, {"prompt": "b2"})
    code, stdout, stderr = await batch(echo_mesh, capsys, other, out)
    assert code == 2 and not stdout
    assert stderr.strip() == (
        f"mediamesh batch: {out} holds the results of another input, {first}; use another "
        "--out (or remove that folder to start over)"
    )
    assert len(manifest_rows(out)) == 2 and len(echo_mesh.core.jobs) == 2
    assert {path.name: path.read_bytes() for path in out.glob("*.png")} == results

    # A copy of the same lines elsewhere (a moved file, an edited copy) continues the folder.
    copy = write_lines(
        tmp_path / "copy.jsonl", {"prompt": "a1"}, {"prompt": "a2"}, {"prompt": "a3"}
    )
    code, stdout, stderr = await batch(echo_mesh, capsys, copy, out)
    assert code == 0 and "1 succeeded, 0 failed, 2 already done" in stdout, stderr


async def test_the_same_file_into_another_folder_is_another_batch(tmp_path, echo_mesh, capsys):
    prompts = write_lines(tmp_path / "prompts.jsonl", {"prompt": "a"}, {"prompt": "b"})
    assert (await batch(echo_mesh, capsys, prompts, tmp_path / "one"))[0] == 0
    assert (await batch(echo_mesh, capsys, prompts, tmp_path / "two"))[0] == 0
    first = {row["job_id"] for row in manifest_rows(tmp_path / "one")}
    second = {row["job_id"] for row in manifest_rows(tmp_path / "two")}
    # Its own jobs, not the first folder's returned again under the same keys.
    assert len(first) == len(second) == 2 and first.isdisjoint(second)
    assert len(echo_mesh.core.jobs) == 4


async def test_a_second_run_into_a_folder_in_use_is_refused(tmp_path, echo_mesh, capsys):
    # Two runs writing one folder would number each other's results (line 1 of each input
    # is 1.png); the second is refused while the first holds the folder.
    prompts = write_lines(tmp_path / "b.jsonl", {"prompt": "b1"})
    out = tmp_path / "out"
    out.mkdir()
    with folder_lock(out):
        code, stdout, stderr = await batch(echo_mesh, capsys, prompts, out)
    assert code == 2 and not stdout
    assert stderr.strip() == (
        f"mediamesh batch: another mediamesh batch is writing to {out}; wait for it to end, "
        "or use another --out"
    )
    assert not (out / "manifest.jsonl").exists() and not echo_mesh.core.jobs
    assert (await batch(echo_mesh, capsys, prompts, out))[0] == 0  # free again afterwards
