"""`mediamesh batch` against a running mesh: a thousand lines, killed midway, resumed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path

import pytest
from PIL import Image

from mediamesh.cli.batch_command import BatchFileError, read_batch
from tests.conftest import ROOT
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, NO_SPOT_WAIT, keyed

LINES = 1000


def manifest_rows(out: Path) -> list[dict]:
    path = out / "manifest.jsonl"
    if not path.exists():
        return []
    rows = []
    for text in path.read_text().splitlines():
        # The row being written when the process was killed may be cut short.
        with contextlib.suppress(json.JSONDecodeError):
            rows.append(json.loads(text))
    return rows


async def batch_process(prompts: Path, out: Path, gateway: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mediamesh.cli.main", "batch", str(prompts), "--out", str(out),
        "--model", "echo", "--gateway", gateway, "--api-key", KEY_A, "--concurrency", "16",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def test_a_thousand_lines_killed_midway_and_resumed_run_each_line_once(
    tmp_path: Path, models_dir: Path
):
    mesh = await start_mesh(
        tmp_path, models_dir, [["echo"]], gateway=keyed(), scheduler=NO_SPOT_WAIT
    )
    gateway = f"127.0.0.1:{mesh.gateway.port}"
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "out"
    prompts.write_text(
        "".join(json.dumps({"prompt": f"prompt {i}", "seed": i}) + "\n" for i in range(LINES))
    )
    try:
        first = await batch_process(prompts, out, gateway)
        for _ in range(1200):
            if len(manifest_rows(out)) >= 150 or first.returncode is not None:
                break
            await asyncio.sleep(0.05)
        first.kill()  # no chance to tidy up, like a lost terminal or an OOM kill
        await first.communicate()
        before = {row["line"]: row["job_id"] for row in manifest_rows(out)}
        assert 150 <= len(before) < LINES, "the first run should stop partway"

        second = await batch_process(prompts, out, gateway)
        stdout, stderr = await asyncio.wait_for(second.communicate(), 240)
        assert second.returncode == 0, stderr.decode()[-2000:]
        assert "already done" in stdout.decode() and "ok=" in stderr.decode()

        rows = manifest_rows(out)
        succeeded = {row["line"]: row for row in rows if row["state"] == "SUCCEEDED"}
        assert sorted(succeeded) == list(range(1, LINES + 1))
        # Lines done before the kill were not run again.
        assert all(succeeded[line]["job_id"] == job_id for line, job_id in before.items())
        job_ids = {row["job_id"] for row in succeeded.values()}
        assert len(job_ids) == LINES
        assert len(mesh.core.jobs) == LINES  # every Submit of the re-run was deduplicated or new
        first_file = out / succeeded[1]["file"]
        assert first_file.name == "1.png" and Image.open(first_file).format == "PNG"
        assert not list(out.glob("*.part"))

        third = await batch_process(prompts, out, gateway)
        stdout, _ = await asyncio.wait_for(third.communicate(), 120)
        assert third.returncode == 0 and f"{LINES} already done" in stdout.decode()
        assert len(mesh.core.jobs) == LINES
    finally:
        await stop_mesh(mesh)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"prompt": "x"}\nnot json\n', "line 2, column 1: not valid JSON"),
        ('{"prompt": "x", "stepz": 3}\n', "unknown field 'stepz'"),
        ('{"prompt": "x", "steps": "3"}\n', "steps must be int"),
        ('{"steps": 3}\n', "prompt is required"),
        ('{"prompt": "x", "priority": "urgent"}\n', "priority must be one of"),
        ("\n\n", "no prompts"),
    ],
)
def test_a_bad_prompts_file_is_refused_before_anything_is_submitted(tmp_path, text, words):
    path = tmp_path / "prompts.jsonl"
    path.write_text(text)
    with pytest.raises(BatchFileError, match=words):
        read_batch(path, "echo")


def test_keys_come_from_each_lines_content_and_number_and_default_to_batch(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        '{"prompt": "a"}\n\n{"prompt": "b", "model": "flux-tiny", "priority": "realtime"}\n'
    )
    first, second = read_batch(path, "echo")
    assert (first.number, second.number) == (1, 3)
    assert first.fields == {"prompt": "a", "model": "echo", "priority": "BATCH"}
    assert second.fields["model"] == "flux-tiny" and second.fields["priority"] == "REALTIME"
    assert first.key != second.key and read_batch(path, "echo")[0].key == first.key
    # Another --model is another request for the lines that take it, not for the others.
    other_first, other_second = read_batch(path, "flux-tiny")
    assert other_first.key != first.key and other_second.key == second.key
    # A line's key is its own: other lines changing, or going, leave it as it is...
    path.write_text('{"prompt": "a"}\n')
    assert read_batch(path, "echo")[0].key == first.key
    # ...while the same content on another line, or other content, is another job.
    path.write_text('\n{"prompt": "a"}\n{"prompt": "a", "seed": 1}\n')
    moved, changed = read_batch(path, "echo")
    assert len({moved.key, changed.key, first.key}) == 3
    with pytest.raises(BatchFileError, match="no model"):
        read_batch(path, None)
