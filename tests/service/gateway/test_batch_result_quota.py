"""`mediamesh batch --delete-results` against a mesh whose tenant has a small result quota:
the run's own results fill it over and over, and it ends with every line recorded and every
job deleted."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from mediamesh.cli.main import main as cli_main
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, NO_SPOT_WAIT, keyed
from tests.service.gateway.test_batch_command import manifest_rows

LINES = 200


async def test_a_run_at_its_own_result_quota_records_and_deletes_every_line(
    tmp_path: Path, models_dir: Path, capsys
):
    gateway = keyed(a={"result_quota_bytes": 20000})
    mesh = await start_mesh(
        tmp_path, models_dir, [["echo"]], gateway=gateway, scheduler=NO_SPOT_WAIT
    )
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "out"
    prompts.write_text(
        "".join(
            json.dumps({"prompt": f"M {i}", "seed": i, "width": 64, "height": 64}) + "\n"
            for i in range(LINES)
        )
    )
    argv = ["batch", str(prompts), "--out", str(out), "--model", "echo", "--quiet"]
    argv += ["--gateway", f"127.0.0.1:{mesh.gateway.port}", "--api-key", KEY_A]
    try:
        code = await asyncio.to_thread(
            cli_main, [*argv, "--delete-results", "--concurrency", "1024"]
        )
        stdout, stderr = capsys.readouterr()
        assert code == 0, stderr
        rows = manifest_rows(out)
        assert sorted(row["line"] for row in rows) == list(range(1, LINES + 1))
        assert {row["state"] for row in rows} == {"SUCCEEDED"}
        assert f"{LINES} deleted from the mesh" in stdout
        assert not mesh.core.jobs  # every job of the run deleted
    finally:
        await stop_mesh(mesh)
