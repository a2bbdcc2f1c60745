"""The in-memory front of the artifact store: recent small results read without the backend."""

from __future__ import annotations

from pathlib import Path

from mediamesh.scheduler.store.artifacts import LocalArtifactStore
from mediamesh.scheduler.store.recent_artifacts import RecentArtifacts


class CountingStore(LocalArtifactStore):
    """The real local backend, counting the reads that reach it."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads = 0

    async def read(self, path: str) -> bytes:
        self.reads += 1
        return await super().read(path)


async def test_a_small_result_is_read_from_memory_and_is_on_disk_too(tmp_path: Path) -> None:
    backend = CountingStore(tmp_path)
    store = RecentArtifacts(backend, max_item_bytes=100)
    stored = await store.write("j1", b"png bytes", "image/png", 7)
    assert Path(stored.path).read_bytes() == b"png bytes"
    assert await store.read(stored.path) == b"png bytes"
    assert backend.reads == 0 and store.hits == 1


async def test_a_result_above_the_item_limit_is_read_from_the_backend(tmp_path: Path) -> None:
    backend = CountingStore(tmp_path)
    store = RecentArtifacts(backend, max_item_bytes=4)
    stored = await store.write("j1", b"too large", "image/png", 7)
    assert await store.read(stored.path) == b"too large"
    assert backend.reads == 1 and len(store) == 0


async def test_the_oldest_results_leave_first_past_the_capacity(tmp_path: Path) -> None:
    backend = CountingStore(tmp_path)
    store = RecentArtifacts(backend, max_item_bytes=10, capacity_bytes=20)
    paths = [(await store.write(f"j{i}", bytes([i]) * 8, "image/png", i)).path for i in range(3)]
    assert len(store) == 2
    assert await store.read(paths[0]) == bytes([0]) * 8  # evicted: from disk
    assert backend.reads == 1
    assert await store.read(paths[2]) == bytes([2]) * 8
    assert backend.reads == 1


async def test_a_deleted_result_is_gone_from_memory_too(tmp_path: Path) -> None:
    backend = CountingStore(tmp_path)
    store = RecentArtifacts(backend, max_item_bytes=100)
    stored = await store.write("j1", b"bytes", "image/png", 7)
    await store.delete(stored.path)
    assert len(store) == 0 and not await store.exists(stored.path)


async def test_rewriting_a_result_replaces_what_memory_holds(tmp_path: Path) -> None:
    store = RecentArtifacts(CountingStore(tmp_path), max_item_bytes=100)
    first = await store.write("j1", b"first", "image/png", 1)
    second = await store.write("j1", b"second try", "image/png", 1)
    assert first.path == second.path and await store.read(second.path) == b"second try"
    assert len(store) == 1
