"""`mediamesh up` shares a host's cores between its CPU workers, one left to the mesh."""

from __future__ import annotations

import os

from mediamesh.cli.core_sharing import shared_torch_threads, with_shared_cores
from mediamesh.cli.up import Mesh
from mediamesh.common.settings import MeshConfig, WorkerSettings


def config_of(*workers: WorkerSettings) -> MeshConfig:
    return MeshConfig(workers=list(workers))


def test_the_cores_less_one_are_shared_and_every_worker_gets_a_thread() -> None:
    assert shared_torch_threads(cores=16, cpu_workers=3) == [5, 5, 5]
    assert shared_torch_threads(cores=2, cpu_workers=1) == [1]
    assert shared_torch_threads(cores=2, cpu_workers=2) == [1, 1]
    assert shared_torch_threads(cores=1, cpu_workers=1) == [1]


def test_no_core_is_left_idle_by_rounding_down() -> None:
    # 15 spare cores among 4 workers: three of them take the remainder, none is left over.
    assert shared_torch_threads(cores=16, cpu_workers=4) == [4, 4, 4, 3]
    assert sum(shared_torch_threads(cores=64, cpu_workers=5)) == 63


def test_only_cpu_workers_without_a_setting_get_a_share() -> None:
    config = config_of(
        WorkerSettings(worker_id="a"),
        WorkerSettings(worker_id="b", torch_threads=3),
        WorkerSettings(worker_id="c"),
        WorkerSettings(worker_id="gpu", device="cuda:0"),
    )
    shared = with_shared_cores(config, cores=9)
    threads = {w.worker_id: w.torch_threads for w in shared.workers}
    # 9 cores, one kept for the mesh and 3 taken by b: 5 left for a and c.
    assert threads == {"a": 3, "b": 3, "c": 2, "gpu": 0}
    assert [w.torch_threads for w in config.workers] == [0, 3, 0, 0]  # a copy, not changed


def test_up_hands_its_workers_their_share(tmp_path) -> None:
    mesh = Mesh(config_of(WorkerSettings(worker_id="w0"), WorkerSettings(worker_id="w1")), tmp_path)
    cores = os.cpu_count() or 1
    assert [w.torch_threads for w in mesh.config.workers] == shared_torch_threads(cores, 2)
