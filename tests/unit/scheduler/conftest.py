"""Fixtures of the webhook delivery tests: a store writer over a fresh job store (a module
may define its own `writer`), and a receiver on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mediamesh.scheduler.store.job_store import JobStore
from mediamesh.scheduler.store.writer import StoreWriter
from tests.webhook_receiver import Receiver, webhook_receiver


@pytest.fixture
async def writer(tmp_path: Path) -> AsyncIterator[StoreWriter]:
    store = JobStore(tmp_path / "jobs.sqlite3")
    writer = StoreWriter(store)
    writer.start()
    yield writer
    await writer.close(5.0)
    await store.close()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with webhook_receiver() as r:
        yield r
