from __future__ import annotations

import functools
import json

import pytest
import torch
from safetensors.torch import save_file

from mediamesh.worker.models import memory


def test_cpu_memory_is_read_from_proc_meminfo() -> None:
    total, free = memory.device_memory("cpu")
    assert 0 < free <= total


def test_check_fits_names_model_sizes_and_device(monkeypatch) -> None:
    monkeypatch.setattr(memory, "device_memory", lambda _d: (8 << 30, 100 * memory.MIB))
    memory.check_fits("small", 10 * memory.MIB, "cpu")
    with pytest.raises(memory.ModelLoadError) as raised:
        memory.check_fits("big", 1000 * memory.MIB, "cpu")
    assert str(raised.value) == "model 'big' needs 1200 MiB on cpu but only 100 MiB free"


def test_weight_parameters_counts_components_and_skips_variants(tmp_path) -> None:
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "X", "unet": ["d", "U"]}))
    (tmp_path / "unet").mkdir()
    save_file({"w": torch.zeros(10, 3), "b": torch.zeros(5)}, tmp_path / "unet" / "m.safetensors")
    save_file({"w": torch.zeros(10, 3)}, tmp_path / "unet" / "m.fp16.safetensors")
    save_file({"w": torch.zeros(1000)}, tmp_path / "single_file.safetensors")
    assert memory.weight_parameters(tmp_path) == 35


# CPU memory inside a memory-limited cgroup --------------------------------------------------

GIB = 1 << 30
MEMINFO = "MemTotal:       67108864 kB\nMemFree:        1000 kB\nMemAvailable:   50331648 kB\n"
HOST_TOTAL, HOST_FREE = 64 * GIB, 48 * GIB


def fake_host(tmp_path, cgroup: str, files: dict[str, str]):
    """A /proc and a /sys/fs/cgroup with `cgroup` as /proc/self/cgroup and `files` in the
    cgroup tree; returns host_memory's arguments."""
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(MEMINFO)
    (proc / "self" / "cgroup").write_text(cgroup)
    root.mkdir()
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return {"proc": proc, "cgroup_root": root}


def test_cgroup_v2_limit_and_working_set(tmp_path) -> None:
    paths = fake_host(
        tmp_path,
        "0::/kubepods/pod1/ctr\n",
        {
            "cgroup.controllers": "cpu memory\n",
            "kubepods/pod1/ctr/memory.max": f"{16 * GIB}\n",
            "kubepods/pod1/ctr/memory.current": f"{6 * GIB}\n",
            # Inactive page cache is reclaimable: not counted as used.
            "kubepods/pod1/ctr/memory.stat": f"anon 1\ninactive_file {2 * GIB}\n",
            "kubepods/pod1/memory.max": "max\n",
        },
    )
    assert memory.host_memory(**paths) == (16 * GIB, 12 * GIB)


def test_cgroup_v2_tightest_ancestor_wins(tmp_path) -> None:
    paths = fake_host(
        tmp_path,
        "0::/pod/ctr\n",
        {
            "cgroup.controllers": "memory\n",
            "pod/ctr/memory.max": "max\n",
            "pod/ctr/memory.current": f"{1 * GIB}\n",
            "pod/memory.max": f"{8 * GIB}\n",
            "pod/memory.current": f"{5 * GIB}\n",
        },
    )
    assert memory.host_memory(**paths) == (8 * GIB, 3 * GIB)


def test_cgroup_v2_namespaced_reads_the_root_of_the_mount(tmp_path) -> None:
    paths = fake_host(
        tmp_path,
        "0::/\n",
        {
            "cgroup.controllers": "memory\n",
            "memory.max": f"{4 * GIB}\n",
            "memory.current": f"{1 * GIB}\n",
        },
    )
    assert memory.host_memory(**paths) == (4 * GIB, 3 * GIB)


def test_cgroup_v1_limit_and_usage(tmp_path) -> None:
    paths = fake_host(
        tmp_path,
        "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n",
        {
            # The container's own cgroup mounted at the root: /docker/abc is not there.
            "memory/memory.limit_in_bytes": f"{2 * GIB}\n",
            "memory/memory.usage_in_bytes": f"{GIB // 2}\n",
            "memory/memory.stat": f"total_inactive_file {GIB // 4}\n",
        },
    )
    assert memory.host_memory(**paths) == (2 * GIB, 2 * GIB - GIB // 4)


def test_unlimited_or_absent_cgroups_fall_back_to_meminfo(tmp_path) -> None:
    unlimited_v1 = fake_host(
        tmp_path / "v1",
        "4:memory:/\n",
        {
            "memory/memory.limit_in_bytes": "9223372036854771712\n",
            "memory/memory.usage_in_bytes": f"{GIB}\n",
        },
    )
    assert memory.host_memory(**unlimited_v1) == (HOST_TOTAL, HOST_FREE)
    unlimited_v2 = fake_host(
        tmp_path / "v2",
        "0::/a\n",
        {"cgroup.controllers": "memory\n", "a/memory.max": "max\n", "memory.max": "max\n"},
    )
    assert memory.host_memory(**unlimited_v2) == (HOST_TOTAL, HOST_FREE)
    no_cgroup = fake_host(tmp_path / "none", "", {})
    assert memory.host_memory(**no_cgroup) == (HOST_TOTAL, HOST_FREE)


def test_free_is_never_more_than_the_host_has(tmp_path) -> None:
    paths = fake_host(
        tmp_path,
        "0::/\n",
        {
            "cgroup.controllers": "memory\n",
            "memory.max": f"{60 * GIB}\n",
            "memory.current": f"{1 * GIB}\n",
        },
    )
    assert memory.host_memory(**paths) == (60 * GIB, HOST_FREE)


def test_cpu_device_memory_is_the_cgroups(tmp_path, monkeypatch) -> None:
    paths = fake_host(
        tmp_path,
        "0::/\n",
        {"cgroup.controllers": "memory\n", "memory.max": f"{GIB}\n", "memory.current": "0\n"},
    )
    monkeypatch.setattr(memory, "host_memory", functools.partial(memory.host_memory, **paths))
    assert memory.device_memory("cpu") == (GIB, GIB)
