"""Work gauges read 0 once the work is gone, not the float residue of the core's running sums
(a drained queue showed 2.66e-15 device-seconds of demand and of device load)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from prometheus_client import REGISTRY

from mediamesh.scheduler import metrics

RESIDUE = 2.66e-15
QUEUE = "residue-test"


def fake_core(work_s: float, load_s: float) -> Any:
    unit = SimpleNamespace(
        pool="on-demand",
        state="ready",
        worker_id="residue-worker",
        load_s=load_s,
        info=SimpleNamespace(devices=("cpu",)),
    )
    return SimpleNamespace(
        depth={},
        work_s={QUEUE: work_s},
        pool_work_s={(QUEUE, "on-demand"): work_s, (QUEUE, "spot"): work_s},
        oldest_wait_s=lambda queue: 0.0,
        pool_demand_s=lambda queue, pool: work_s + load_s,
        units={"residue-worker": unit},
        ledger=SimpleNamespace(on_demand_cost=lambda: 0.0),
    )


def sample(name: str, **labels: str) -> float:
    return cast(float, REGISTRY.get_sample_value(name, labels))


def published(work_s: float, load_s: float) -> dict[str, float]:
    metrics.publish_gauges(fake_core(work_s, load_s), [QUEUE])
    return {
        "work": sample("mediamesh_queue_work_seconds", queue=QUEUE),
        "pool_work": sample("mediamesh_queue_pool_work_seconds", queue=QUEUE, pool="on-demand"),
        "spot_work": sample("mediamesh_queue_pool_work_seconds", queue=QUEUE, pool="spot"),
        "demand": sample("mediamesh_queue_pool_demand_seconds", queue=QUEUE, pool="on-demand"),
        "load": sample("mediamesh_device_load", worker="residue-worker", device="cpu"),
    }


def test_residue_of_a_drained_queue_reads_zero() -> None:
    gauges = published(RESIDUE, RESIDUE)
    assert gauges == dict.fromkeys(gauges, 0.0)
    # The sign of the residue does not matter either.
    gauges = published(-RESIDUE, -RESIDUE)
    assert gauges == dict.fromkeys(gauges, 0.0)


def test_real_work_is_published_as_it_is() -> None:
    gauges = published(0.002, 1.5)
    assert gauges["work"] == 0.002
    assert gauges["pool_work"] == gauges["spot_work"] == 0.002
    assert gauges["demand"] == 1.502
    assert gauges["load"] == 1.5
