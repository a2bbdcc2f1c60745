"""The simulator against a real `mediamesh up` (issue #8): one fleet, one arrival trace.

The mesh runs a seeded open-loop Poisson workload. The simulator then replays the arrival
times the scheduler saw, on a device fitted to what the real worker did (the scheduler's
batch spans, the worker's StepDone.step_seconds), and must agree on throughput, queue-wait
p50/p95 and mean batch size within TOLERANCE. Run with -s for the numbers.

What this 2-core machine can hold honestly is one worker running flux-small, batches of at
most 4. Measured, and why the rest would test the machine rather than the simulator:
- two flux-small workers slow each other about 1.8x whenever both are busy (they share
  memory bandwidth), while the simulator's devices are independent;
- flux-tiny is so light that the mesh's own CPU use makes its batch times vary 30-50 %,
  while the simulator's are deterministic;
- flux-small batches of 5-6 run 6-24 % slower than the simulator's b**exponent predicts from
  the smaller ones, and bursts are exactly when they form (README, Performance).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from mediamesh.common.registry import DEFAULT_REGISTRY
from mediamesh.common.settings import SchedulerSettings
from mediamesh.sim.validation import (
    DeviceFit,
    MeasuredBatch,
    ValidationResult,
    fit_device,
    simulate_small_for_validation,
    write_trace,
)
from tests.e2e.conftest import mesh_config, start, stop
from tests.e2e.mesh_spans import (
    QueueWait,
    RealBatch,
    handoff_gaps,
    queue_waits,
    read_spans,
    real_batches,
)
from tests.e2e.open_loop import JobTiming, PlannedJob, run_open_loop

# Serial: its real mesh's timings must not share the machine with another test's mesh.
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

MODEL = "flux-small"
# One step keeps a batch of one near 0.1 s (a step plus text encoding, decoding and PNG).
PARAMS = {"steps": 1, "width": 64, "height": 64}
WORKERS = 1
# As many jobs as arrive in ARRIVALS_S at the calibrated rate (capped at 150, about 12 s of
# arrivals at 12-13/s), but at least MIN_JOBS so that a p95 still rests on a few jobs.
ARRIVALS_S = 25.0
MIN_JOBS, MAX_JOBS = 80, 150
SEED = 8
BATCHING = {"mode": "dynamic", "max_batch": 4, "max_wait_ms": 50}
# Arrivals per second = TARGET_LOAD / a lone job's service time, measured just before the run:
# this machine's speed moves 20 % with what else runs on it, and a fixed rate would drift
# from a third busy to near saturation, where any model error explodes. With batching the
# worker is then busy about 60 % of the time; queues form in the Poisson bursts. (0.7 gave
# that while a lone job's latency held more of the mesh's own overhead; with less of it, 0.7
# left the worker 51-56 % busy, too idle for the two-worker simulator to differ.)
TARGET_LOAD = 0.9

# Allowed |simulated - real| = fraction x real + seconds.
# - The simulator runs every batch in its fitted mean time. Real batch times scatter 10-13 %
#   around it on this shared machine, often in slow spells of several batches, and a p95 comes
#   from 2-3 arrival bursts: simulating the very same trace with that scatter moved p95 by up
#   to 15 % either way, seed to seed; measured runs land within 16 % (README, Performance).
# - The real dispatch loop acts a few ms after the simulator would (the batch window's timer;
#   dispatch to the RunBatch call): the absolute part, which matters at p50, where waits sit
#   at the 50 ms batch window.
# A simulator without batching is 2-4x over on p95; one with two workers about 2x under on
# p95 (and 7-15 % under on batch size). Both are asserted to fail: the tolerance stays
# meaningful.
TOLERANCE = {
    "throughput_jobs_per_s": (0.05, 0.0),
    "wait_p50_s": (0.25, 0.025),
    "wait_p95_s": (0.25, 0.025),
    "mean_batch_size": (0.15, 0.0),
}


@dataclass(frozen=True)
class Numbers:
    throughput_jobs_per_s: float
    wait_p50_s: float
    wait_p95_s: float
    mean_batch_size: float
    # Reported, not compared: the simulator has no client, gateway hop or result relay.
    latency_p50_s: float
    latency_p95_s: float


def simulated(result: ValidationResult) -> Numbers:
    wait, latency = result.wait_s, result.latency_s
    assert wait["p50"] is not None and wait["p95"] is not None
    assert latency["p50"] is not None and latency["p95"] is not None
    return Numbers(
        result.throughput_jobs_per_s,
        wait["p50"],
        wait["p95"],
        result.mean_batch_size,
        latency["p50"],
        latency["p95"],
    )


def measured(timings: list[JobTiming], waits: dict[str, QueueWait], batches: int) -> Numbers:
    """Waits as the scheduler measured them (acceptance to dispatch, what the simulator
    reports); throughput and latency as the client saw them."""
    wait = [waits[t.job_id].dispatched - waits[t.job_id].accepted for t in timings]
    latency = [t.finished - t.submitted for t in timings if t.finished is not None]
    span = max(t.finished or 0.0 for t in timings) - min(t.submitted for t in timings)
    return Numbers(
        len(timings) / span,
        float(np.percentile(wait, 50)),
        float(np.percentile(wait, 95)),
        len(timings) / batches,
        float(np.percentile(latency, 50)),
        float(np.percentile(latency, 95)),
    )


def mismatches(sim: Numbers, real: Numbers) -> list[str]:
    out = []
    for name, (fraction, seconds) in TOLERANCE.items():
        s, r = getattr(sim, name), getattr(real, name)
        if abs(s - r) > fraction * r + seconds:
            out.append(f"{name}: simulated {s:.3f} vs real {r:.3f}")
    return out


def lone_job_service_s(gateway: str) -> float:
    """Median latency of a job alone in the mesh, less the batch window it waits out."""
    latencies = []
    for _ in range(5):
        (timing,) = asyncio.run(run_open_loop(gateway, [PlannedJob(0.0, MODEL, PARAMS)]))
        assert timing.finished is not None
        latencies.append(timing.finished - timing.submitted)
    return float(np.median(latencies)) - BATCHING["max_wait_ms"] / 1000


def poisson_plan(rate_per_s: float) -> list[PlannedJob]:
    """The same seeded arrival pattern at any rate (unit gaps scaled by 1 / rate), cut to
    about ARRIVALS_S seconds of arrivals."""
    jobs = min(max(round(rate_per_s * ARRIVALS_S), MIN_JOBS), MAX_JOBS)
    gaps = np.random.default_rng(SEED).exponential(1.0, MAX_JOBS)[:jobs] / rate_per_s
    return [PlannedJob(float(t), MODEL, PARAMS) for t in np.cumsum(gaps) - gaps[0]]


def registry_with(folder: Path, name: str, batching: dict) -> Path:
    """The default registry with MODEL's batching replaced."""
    raw = yaml.safe_load(DEFAULT_REGISTRY.read_text())
    for entry in raw["models"]:
        if entry["name"] == MODEL:
            entry["batching"] = batching
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def describe(
    fit: DeviceFit, batches: list[RealBatch], waits: dict[str, QueueWait], timings: list[JobTiming]
) -> str:
    """What the real run measured, beyond the compared numbers, for the -s output."""
    single = fit.step_seconds[MODEL] * PARAMS["steps"] + fit.overhead_s[MODEL]
    gaps = handoff_gaps(batches, waits, BATCHING["max_wait_ms"] / 1000) or [float("nan")]
    span = max(b.ended for b in batches) - min(b.started for b in batches)
    busy = sum(b.ended - b.started for b in batches) / (WORKERS * span)
    client = [t.started - t.submitted for t in timings if t.started is not None]
    return (
        f"fit: batch of one {single:.3f} s ({fit.step_seconds[MODEL]:.4f} s a step), batch "
        f"exponent {fit.batch_exponent:.2f}; worker busy {busy:.0%}; next batch "
        f"{np.median(gaps) * 1000:.1f} ms after the last (median); waits seen "
        f"by the client p50 {np.percentile(client, 50):.3f} s, "
        f"p95 {np.percentile(client, 95):.3f} s"
    )


def table(rows: dict[str, Numbers]) -> str:
    names = list(Numbers.__dataclass_fields__)
    lines = [" " * 12 + "".join(f"{n:>22}" for n in names)]
    for label, numbers in rows.items():
        lines.append(f"{label:12}" + "".join(f"{getattr(numbers, n):22.3f}" for n in names))
    return "\n".join(lines)


# A second run on a fresh mesh when the first misses: a burst of CPU taken by the
# hypervisor (steal, seen at 10-29 % for minutes on this machine) slows the real mesh's batches
# in a way no device fit of the same run can follow. Missing twice in a row still fails.
ATTEMPTS = 2


@dataclass(frozen=True)
class Comparison:
    rows: dict[str, Numbers]
    summary: str

    def misses(self, name: str) -> list[str]:
        return mismatches(self.rows[name], self.rows["real"])


def compare_once(folder: Path, models_dir: Path) -> Comparison:
    """One real mesh under one Poisson plan, and the simulator on the arrivals it saw."""
    folder.mkdir(parents=True)
    registry = registry_with(folder, "models", BATCHING)
    config = mesh_config(
        folder,
        models_dir,
        [{"models": [MODEL]}] * WORKERS,
        registry_path=str(registry),
        telemetry={"traces": "file", "trace_file": str(folder / "spans-{service}.jsonl")},
        # The simulator starts a worker's next batch when its last one ends, as the mesh
        # does without dispatching ahead: that is the mesh it is validated against.
        scheduler={"dispatch_ahead": False},
    )
    mesh = start(folder, config)
    try:
        # The first run of each batch shape is slow (allocations); keep it out of the measure.
        for size in range(1, BATCHING["max_batch"] + 1):
            asyncio.run(run_open_loop(mesh.gateway, [PlannedJob(0.0, MODEL, PARAMS)] * size))
        rate = TARGET_LOAD / lone_job_service_s(mesh.gateway)
        plan = poisson_plan(rate)
        timings = asyncio.run(run_open_loop(mesh.gateway, plan))
    finally:
        stop(mesh)  # the last spans are written as the processes end
    assert [t.outcome for t in timings] == ["SUCCEEDED"] * len(plan)

    spans = read_spans(folder)
    waits = queue_waits(spans)
    ids = {t.job_id for t in timings}
    batches = [b for b in real_batches(spans, waits) if b.job_ids <= ids]
    fit = fit_device(
        [MeasuredBatch(b.model, len(b.job_ids), b.ended - b.started, b.step_s) for b in batches],
        {MODEL: PARAMS["steps"]},
    )
    arrivals = [(waits[t.job_id].accepted, MODEL) for t in timings]
    trace = write_trace(folder / "arrivals.jsonl", arrivals, "STANDARD")

    def simulate(workers: int = WORKERS, registry: Path = registry) -> Numbers:
        return simulated(
            simulate_small_for_validation(
                fit.step_seconds,
                workers=workers,
                overhead_s=fit.overhead_s,
                batch_exponent=fit.batch_exponent,
                registry_path=registry,
                scheduler=SchedulerSettings(**config["scheduler"]),
                trace=trace,
                params={MODEL: PARAMS},
            )
        )

    rows = {
        "real": measured(timings, waits, len(batches)),
        "simulated": simulate(),
        "no batching": simulate(registry=registry_with(folder, "unbatched", {"mode": "none"})),
        "two workers": simulate(workers=WORKERS + 1),
    }
    summary = f"{len(plan)} jobs at {rate:.2f}/s; " + describe(fit, batches, waits, timings)
    return Comparison(rows, summary)


def test_the_simulator_matches_a_real_mesh(models_dir: Path, tmp_path: Path):
    for attempt in range(ATTEMPTS):
        comparison = compare_once(tmp_path / f"attempt-{attempt}", models_dir)
        print(f"\nattempt {attempt}: {comparison.summary}\n{table(comparison.rows)}")
        # The tolerance must tell the wrong simulators apart in every run, missed or not.
        assert comparison.misses("no batching"), "the tolerance cannot tell no batching"
        assert comparison.misses("two workers"), "the tolerance cannot tell two workers"
        if not comparison.misses("simulated"):
            return
    raise AssertionError(f"missed in {ATTEMPTS} runs; the last: {comparison.misses('simulated')}")
