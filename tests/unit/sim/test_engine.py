"""The simulation loop: determinism, conservation of jobs, and spot preemption with resume."""

from __future__ import annotations

import numpy as np

from mediamesh.scheduler.core.jobs import Priority
from mediamesh.sim.arrivals import ArrivalPlan
from mediamesh.sim.engine import NOTICE
from mediamesh.sim.records import REJECTED, SUCCEEDED
from mediamesh.sim.simulation import build, simulate

from .support import tiny

BUSY = {
    "spot": {"preemptions_per_device_hour": 400.0, "notice_s": 2.0},
    "workload": {"jobs": 1500, "arrivals": {"process": "bursty", "burst_rate_per_s": 20}},
}


def test_the_same_seed_gives_the_same_run() -> None:
    first = simulate(tiny(**BUSY), seed=11)
    second = simulate(tiny(**BUSY), seed=11)
    assert first.stats == second.stats
    assert first.fleet == second.fleet
    assert first.scheduler == second.scheduler
    assert np.array_equal(first.records.finished, second.records.finished, equal_nan=True)
    assert first.series.replicas == second.series.replicas


def test_another_seed_gives_another_run() -> None:
    first = simulate(tiny(), seed=1)
    second = simulate(tiny(), seed=2)
    assert not np.array_equal(first.records.finished, second.records.finished, equal_nan=True)


def test_every_job_ends_exactly_once_and_nothing_is_left_in_the_core() -> None:
    scenario = tiny(
        spot=BUSY["spot"],
        scheduler={"queues": {"image": {"sla_s": 10, "max_depth": 40}}},
        workload={
            **BUSY["workload"],
            "tenants": {"a": {"share": 2, "max_running": 2}, "b": {"share": 1}},
        },
        fleet=[
            {"name": "od", "device": "gpu", "pool": "on-demand", "modality": "image",
             "replicas": 2,
             "autoscale": {"min_replicas": 1, "max_replicas": 6, "threshold": 2,
                           "polling_s": 5, "cooldown_s": 30}},
            {"name": "od-audio", "device": "gpu", "pool": "on-demand", "modality": "audio",
             "replicas": 1},
            {"name": "spot", "device": "gpu", "pool": "spot", "replicas": 3},
        ],
    )  # fmt: skip
    simulation = build(scenario)
    result = simulation.run()
    records = result.records
    assert (records.ends == 1).all()
    assert (records.outcome == REJECTED).any(), "the small image queue should reject some"
    assert records.preempted > 0, "spot notices should have preempted running batches"
    assert ((records.outcome == SUCCEEDED) | (records.outcome == REJECTED)).all()
    core = simulation.engine.core
    assert sum(core.depth.values()) == 0
    assert sum(core.running.values()) == 0
    assert core.jobs == {}, "finished jobs are forgotten, so memory stays bounded"
    ended = sum(core.ended.values()) + int((records.outcome == REJECTED).sum())
    assert ended == len(records.outcome)


def one_batch_job_plan(steps_model: str = "flux-tiny") -> ArrivalPlan:
    return ArrivalPlan(
        times=np.array([0.0]),
        model=np.array([0], dtype=np.int16),
        priority=np.array([int(Priority.BATCH)], dtype=np.int8),
        tenant=np.array([0], dtype=np.int32),
        models=(steps_model,),
        tenants=("a",),
    )


def test_a_preempted_job_resumes_elsewhere_and_runs_only_its_remaining_steps() -> None:
    scenario = tiny(
        scheduler={"placement": {"BATCH": {"fallback_after_s": 0}}},
        workload={"params": {"flux-tiny": {"steps": 40}}},
        fleet=[
            {"name": "od", "device": "gpu", "pool": "on-demand", "replicas": 1},
            {"name": "spot", "device": "gpu", "pool": "spot", "replicas": 1},
        ],
        spot={"notice_s": 3.0},
    )
    simulation = build(scenario, plan=one_batch_job_plan())
    step_s, overhead_s = simulation.cluster.speeds["gpu"].batch("flux-tiny", 1)
    notice_at = 1.5
    simulation.cluster.start()
    [spot] = [d for d in simulation.engine.devices.values() if d.pool == "spot"]
    simulation.engine.at(notice_at, NOTICE, spot)
    simulation.engine.run(until=1000.0)

    records = simulation.engine.records
    started = records.first_dispatch[0]
    assert started < notice_at, "the BATCH job first ran on spot"
    done_steps = int((notice_at - started - overhead_s) / step_s)
    assert 0 < done_steps < 40
    expected_end = notice_at + overhead_s + (40 - done_steps) * step_s
    assert records.outcome[0] == SUCCEEDED
    assert records.ends[0] == 1
    assert records.preempted == 1
    assert abs(records.finished[0] - expected_end) < 1e-9
    assert simulation.engine.core.preemptions["spot"] == 1


def test_spot_devices_are_replaced_after_a_reclaim() -> None:
    simulation = build(tiny(spot={"preemptions_per_device_hour": 3600.0, "notice_s": 1.0}))
    result = simulation.run()
    assert result.scheduler["spot_notices"] > 0
    spot = next(s for s in simulation.states if s.spec.pool == "spot")
    assert spot.started > spot.target, "reclaimed spot replicas were replaced"
    assert (result.records.outcome == SUCCEEDED).all()


def test_scaling_on_demand_keeps_a_busy_pool_up() -> None:
    def on_demand_device_hours(metric: str) -> float:
        scenario = tiny(
            workload={"jobs": 3000, "arrivals": {"rate_per_s": 12}},
            fleet=[
                {"name": "od", "device": "gpu", "pool": "on-demand", "modality": "image",
                 "replicas": 6,
                 "autoscale": {"min_replicas": 1, "max_replicas": 12, "threshold": 5,
                               "polling_s": 5, "cooldown_s": 20, "metric": metric}},
                {"name": "audio", "device": "gpu", "pool": "on-demand", "modality": "audio",
                 "replicas": 2},
            ],
            scheduler={"placement": {"BATCH": {"prefer": "on-demand",
                                               "allow": ["on-demand"]}}},
        )  # fmt: skip
        result = simulate(scenario)
        # The audio pool is fixed, so any difference is the autoscaled image pool's.
        row = next(r for r in result.fleet["by_pool_device"] if r["pool"] == "on-demand")
        return row["device_hours"]

    assert on_demand_device_hours("demand") > on_demand_device_hours("backlog")


def test_a_class_is_held_to_its_own_sla_in_the_report() -> None:
    """`class_sla_s` tightens one class's target: its attainment falls, the others' do not."""
    workload = {"priorities": {"REALTIME": 1, "STANDARD": 2}}
    plain = simulate(tiny(workload=workload), seed=5).stats["by_modality_priority"]
    tight = simulate(
        tiny(
            workload=workload,
            scheduler={"queues": {"image": {"sla_s": 10, "class_sla_s": {"REALTIME": 0.001}}}},
        ),
        seed=5,
    ).stats["by_modality_priority"]
    assert tight["image/REALTIME"]["sla_s"] == 0.001
    assert plain["image/REALTIME"]["sla_attainment"] > 0.5
    assert tight["image/REALTIME"]["sla_attainment"] == 0.0
    assert tight["image/STANDARD"]["sla_s"] == 10
    assert tight["image/STANDARD"]["sla_attainment"] > 0.5
