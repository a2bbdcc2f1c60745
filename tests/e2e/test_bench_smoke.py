"""`python -m bench.run all --smoke` keeps working: results complete, nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e

BENCHMARKS = ("overhead", "batching", "priority", "recovery")
LEVEL_FIELDS = ("concurrency", "requests", "errors", "throughput_rps", "p50_ms", "p95_ms", "p99_ms")


def test_bench_smoke_writes_every_result(tmp_path: Path, models_dir: Path):
    out = tmp_path / "results"
    # The meshes' temp dirs land here, so a leftover process can be found by its path.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "MEDIAMESH_MODELS_DIR": str(models_dir)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "all", "--smoke", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=270,
    )
    assert done.returncode == 0, done.stderr[-4000:]

    for name in BENCHMARKS:
        record = json.loads((out / f"{name}.json").read_text())
        assert record["name"] == name
        assert record["smoke"] is True
        assert len(record["git"]["commit"]) == 40
        assert record["machine"]["cpu_count"] >= 1
        assert record["machine"]["memory_bytes"] > 0
        assert record["config"]["mesh"]["workers"]
        assert record["levels"], name
        for level in record["levels"]:
            missing = [f for f in LEVEL_FIELDS if f not in level]
            assert not missing, f"{name} level lacks {missing}: {level}"
            if name in ("overhead", "batching"):
                assert level["requests"] > level["errors"], level
        assert (out / record["plot"]).stat().st_size > 0

    overhead = json.loads((out / "overhead.json").read_text())
    assert {lv["api"] for lv in overhead["levels"]} == {"native", "kserve", "openai"}
    batching = json.loads((out / "batching.json").read_text())
    paths = {"direct", "direct-beside", "mesh", "direct-paired", "mesh-paired"}
    assert {lv["path"] for lv in batching["levels"]} == paths
    # The c=1 figure compares the mesh with batch 1 measured beside it, not before it.
    (beside,) = [lv for lv in batching["levels"] if lv["path"] == "direct-beside"]
    c1 = batching["summary"][beside["model"]][beside["layout"]]
    assert c1["direct_batch1_p50_ms"] == beside["p50_ms"], c1
    # Each paired round runs the first pass's best direct level, then the mesh at c=32, and
    # its ratio is the one of those two rows.
    for model, entry in batching["summary"].items():
        best = (entry["direct_best_batch_size"], entry["direct_best_threads"])
        rounds = [lv for lv in batching["levels"] if lv["model"] == model and "round" in lv]
        (pair_direct,) = [lv for lv in rounds if lv["path"] == "direct-paired"]
        (pair_mesh,) = [lv for lv in rounds if lv["path"] == "mesh-paired"]
        assert (pair_direct["batch_size"], pair_direct["threads"]) == best, pair_direct
        assert pair_mesh["concurrency"] == 32, pair_mesh
        ratio = round(pair_mesh["throughput_rps"] / pair_direct["throughput_rps"], 3)
        assert entry[pair_mesh["layout"]]["c32_paired_ratios"] == [ratio], entry
        assert entry[pair_mesh["layout"]]["c32_paired_ratio_median"] == ratio, entry
        # Where the c=32 level's CPU went, by process (in clock ticks of 10 ms: a smoke
        # level's two requests may read 0 for a role).
        cpu = entry[pair_mesh["layout"]]["c32_cpu_ms_per_request"]
        assert set(cpu) == {"scheduler", "gateway", "workers", "loadgen"}, cpu
        assert all(ms >= 0 for ms in cpu.values()) and cpu["workers"] > 0, cpu
    priority = json.loads((out / "priority.json").read_text())
    assert "realtime_within_sla" in priority["summary"]
    recovery = json.loads((out / "recovery.json").read_text())
    assert {lv["phase"] for lv in recovery["levels"]} == {"worker_sigkill", "scheduler_sigkill"}
    caching = json.loads((out / "caching.json").read_text())
    assert caching["levels"] and (out / caching["plot"]).stat().st_size > 0
    for row in caching["levels"]:
        assert row["speedup"] > 0 and 0 < row["psnr_db_mean"] <= 100, row
    previews = json.loads((out / "previews.json").read_text())
    assert previews["summary"]["decode_ms_median"] > 0 and len(previews["levels"]) == 2
    assert (out / previews["plot"]).stat().st_size > 0

    leftovers = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if str(scratch) in " ".join(p.info["cmdline"] or [])
    ]
    assert not leftovers, f"processes left running: {leftovers}"
