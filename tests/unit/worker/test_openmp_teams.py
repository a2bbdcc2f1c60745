"""A batch thread frees its OpenMP team as it gives the device up: the gate calls `on_leave`
on that thread, and the releaser frees the team in the libgomp copy torch itself uses."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from mediamesh.worker.core.gate import DeviceGate, Rank
from mediamesh.worker.models.openmp import _loaded_libraries, torch_gnu_openmp


def test_the_gate_calls_on_leave_on_the_thread_giving_the_device_up() -> None:
    left: list[tuple[str, str | None]] = []
    gate: DeviceGate

    def on_leave() -> None:
        left.append((threading.current_thread().name, gate.holder))

    gate = DeviceGate(on_leave=on_leave)
    urgent_ran = threading.Event()

    def batch() -> None:
        gate.enqueue("a", Rank.NORMAL)
        gate.acquire("a")
        gate.enqueue("urgent", Rank.URGENT)
        gate.step_aside("a")  # the urgent batch runs meanwhile, then "a" has the device back
        assert urgent_ran.is_set()
        gate.release("a")

    def urgent() -> None:
        gate.acquire("urgent")
        urgent_ran.set()
        gate.release("urgent")

    first = threading.Thread(target=batch, name="batch-a")
    first.start()
    while not gate.urgent_waiting():
        threading.Event().wait(0.001)
    second = threading.Thread(target=urgent, name="batch-urgent")
    second.start()
    first.join(5)
    second.join(5)
    # Each while it still held the device, on its own thread.
    assert left == [("batch-a", "a"), ("batch-urgent", "urgent"), ("batch-a", "a")]


def test_torch_s_own_copy_is_chosen_among_the_loaded_ones(tmp_path: Path) -> None:
    torch_dir = tmp_path / "site-packages" / "torch"
    own = torch_dir / "lib" / "libgomp.so.1"
    other = tmp_path / "site-packages" / "sentencepiece.libs" / "libgomp-6a29c32d.so.1.0.0"
    system = Path("/usr/lib/x86_64-linux-gnu/libgomp.so.1")
    assert torch_gnu_openmp(torch_dir, [other, own]) == own
    assert torch_gnu_openmp(torch_dir, [system]) == system  # a distribution's torch
    assert torch_gnu_openmp(torch_dir, [other, system]) is None  # which is torch's is unknown
    assert torch_gnu_openmp(torch_dir, []) is None


def test_loaded_libraries_are_read_from_the_process_maps(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r--p 00000000 08:01 11 /opt/a/libgomp-6a29c32d.so.1.0.0\n"
        "7f01-7f02 r-xp 00001000 08:01 11 /opt/a/libgomp-6a29c32d.so.1.0.0\n"
        "7f02-7f03 rw-p 00000000 00:00 0 \n"
        "7f03-7f04 r-xp 00000000 08:01 12 /opt/torch/lib/libgomp.so.1\n"
        "7f04-7f05 r-xp 00000000 08:01 13 /opt/torch/lib/libtorch_cpu.so\n"
    )
    assert _loaded_libraries("libgomp", maps) == [
        Path("/opt/a/libgomp-6a29c32d.so.1.0.0"),
        Path("/opt/torch/lib/libgomp.so.1"),
    ]
    assert _loaded_libraries("libgomp", tmp_path / "missing") == []


# Run in a fresh interpreter: the test process's own threads and teams stay out of the count.
_TEAM_COUNT = """
import json, os, threading
import sentencepiece  # loads a libgomp copy of its own first, as a worker's tokenizers do
import torch
from mediamesh.worker.models.openmp import team_releaser

torch.set_num_threads(2)
release = team_releaser()
threads = []

def batch():
    x = torch.randn(256, 256)
    for _ in range(3):
        x = torch.tanh(x @ x)  # parallel ops: this thread gets a team of two
    threads.append(len(os.listdir("/proc/self/task")))
    release()
    threads.append(len(os.listdir("/proc/self/task")))

worker = threading.Thread(target=batch)
worker.start()
worker.join()
print(json.dumps(threads))
"""


def test_releasing_frees_the_calling_thread_s_team_in_torch_s_openmp() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _TEAM_COUNT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    computing, released = json.loads(done.stdout.splitlines()[-1])
    assert released == computing - 1  # the team's one helper has exited
