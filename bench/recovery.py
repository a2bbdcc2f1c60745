"""recovery: SIGKILL a worker mid-batch, and SIGKILL the scheduler; time until service resumes.

worker: two flux-small jobs form one batch on one worker; at step 2 that worker is killed.
Measured from the kill to the first progress event of one of its jobs on another worker
(also: to the requeue and to the new dispatch). `mediamesh up` restarts the dead worker,
and the next trial waits until it has registered again.
scheduler: killed with two jobs in flight; measured from the kill to health SERVING, to
the first successful Submit through the gateway, and to the next progress of a job.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import grpc
import matplotlib
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mediamesh.common.channels import RECONNECT_OPTIONS
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from bench.common import Options, Result, level, log
from bench.launcher import Mesh, public_config

MODEL = "flux-small"
WORKERS = [{"models": [MODEL], "torch_threads": 1} for _ in range(2)]
JOBS = 2
POLL_S = 0.02
TRIAL_TIMEOUT_S = 60.0
# Bounds the optional waits of the scheduler trial (workers re-attaching, jobs resuming).
SCHEDULER_WAIT_S = 20.0


@dataclass
class Tracker:
    """Every event of the trial's jobs, with when it arrived."""

    # (arrival, job id, event, the worker the job was on when the event arrived)
    events: list[tuple[float, str, common_pb2.GenerateEvent, str]] = field(default_factory=list)
    worker_of: dict[str, str] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, job_id: str, event: common_pb2.GenerateEvent) -> None:
        if event.WhichOneof("event") == "notice" and event.notice.kind == "dispatched":
            self.worker_of[job_id] = event.notice.worker_id
        self.events.append((time.monotonic(), job_id, event, self.worker_of.get(job_id, "")))
        self.changed.set()

    def first(
        self,
        after: float,
        kind: str,
        notice: str = "",
        exclude_worker: str = "",
        jobs: Collection[str] = (),
    ) -> float:
        """When the first event of `kind` after `after` arrived (0.0: none yet); `jobs`
        limits it to those jobs."""
        for at, job_id, event, worker in self.events:
            if at < after or event.WhichOneof("event") != kind:
                continue
            if jobs and job_id not in jobs:
                continue
            if notice and event.notice.kind != notice:
                continue
            if exclude_worker and worker == exclude_worker:
                continue
            return at
        return 0.0

    def first_fresh_progress(self, after: float) -> float:
        """The first progress of a run that started after `after`: of a later attempt than
        any the job showed before it (dispatched notices count, so an old run's progress
        still in flight at `after` does not). A re-attached Watch opens with the last
        progress the scheduler knows, which may be the old run's; its attempt tells."""
        attempt_before: dict[str, int] = {}
        for at, job_id, event, _ in self.events:
            kind = event.WhichOneof("event")
            if kind == "progress":
                attempt = event.progress.attempt
            elif kind == "notice" and event.notice.kind == "dispatched":
                attempt = event.notice.attempt
            else:
                continue
            if at < after:
                attempt_before[job_id] = max(attempt_before.get(job_id, 0), attempt)
            elif kind == "progress" and attempt > attempt_before.get(job_id, 0):
                return at
        return 0.0

    def progressed(self, min_step: int) -> str:
        """A job that has reached `min_step`, or ""."""
        for _, job_id, event, _ in self.events:
            if event.WhichOneof("event") == "progress" and event.progress.step >= min_step:
                return job_id
        return ""

    async def until(self, predicate: Any, timeout: float = TRIAL_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("recovery trial: condition not met in time")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))


async def follow(stub: gateway_pb2_grpc.GatewayStub, job_id: str, tracker: Tracker) -> None:
    """Watch a job to its end, re-attaching when the mesh drops the stream."""
    while True:
        try:
            async for event in stub.Watch(gateway_pb2.WatchRequest(job_id=job_id)):
                tracker.add(job_id, event)
                if event.WhichOneof("event") in ("result", "error"):
                    return
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.1)


async def submit(stub: gateway_pb2_grpc.GatewayStub, steps: int, tag: str) -> list[str]:
    """All at once, so they land within one batching window and share one batch."""
    requests = [
        common_pb2.GenerateRequest(
            model=MODEL, prompt=f"recovery {tag} {index}", steps=steps, seed=index
        )
        for index in range(JOBS)
    ]
    handles = await asyncio.gather(*(stub.Submit(r, timeout=30) for r in requests))
    return [h.job_id for h in handles]


async def cancel_all(stub: gateway_pb2_grpc.GatewayStub, ids: list[str]) -> None:
    for job_id in ids:
        with contextlib.suppress(grpc.aio.AioRpcError):
            await stub.Cancel(gateway_pb2.CancelRequest(job_id=job_id), timeout=10)


async def workers_ready(stub: gateway_pb2_grpc.GatewayStub, count: int, timeout: float) -> bool:
    """Whether `count` live workers host the model (a restarted one has registered again)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            reply = await stub.ListModels(gateway_pb2.ListModelsRequest(), timeout=5)
            model = next(m for m in reply.models if m.name == MODEL)
            if len({d.split("/")[0] for d in model.devices}) >= count:
                return True
        except (grpc.aio.AioRpcError, StopIteration):
            pass
        await asyncio.sleep(0.25)
    return False


async def worker_trial(mesh: Mesh, stub: gateway_pb2_grpc.GatewayStub, steps: int) -> dict:
    count = len(mesh.config["workers"])
    if not await workers_ready(stub, count, TRIAL_TIMEOUT_S):
        raise TimeoutError(f"fewer than {count} workers host {MODEL}")
    tracker = Tracker()
    ids = await submit(stub, steps, "worker")
    watchers = [asyncio.create_task(follow(stub, j, tracker)) for j in ids]
    try:
        await tracker.until(lambda: bool(tracker.progressed(2)))
        victim = tracker.worker_of[tracker.progressed(2)]
        victim_jobs = [j for j in ids if tracker.worker_of.get(j) == victim]
        os.kill(mesh.child_pid("worker", victim), signal.SIGKILL)
        killed = time.monotonic()
        # The victim's own jobs, not the survivor's: those never stopped.
        lost = set(victim_jobs)

        def first(kind: str, notice: str = "") -> float:
            # A requeue is announced while the job still names the victim as its worker.
            elsewhere = "" if notice == "requeued" else victim
            return tracker.first(killed, kind, notice, exclude_worker=elsewhere, jobs=lost)

        await tracker.until(lambda: first("progress") > 0)
        return {
            "victim": victim,
            "victim_jobs": len(victim_jobs),
            # Jobs split over both workers make the survivor finish its own batch first.
            "survivor_was_busy": len(victim_jobs) < len(ids),
            "resumed_on": sorted({tracker.worker_of[j] for j in victim_jobs} - {victim}),
            "requeued_s": _since(killed, first("notice", "requeued")),
            "redispatched_s": _since(killed, first("notice", "dispatched")),
            "recovered_s": _since(killed, first("progress")),
        }
    finally:
        await cancel_all(stub, ids)
        for task in watchers:
            task.cancel()


async def scheduler_trial(mesh: Mesh, stub: gateway_pb2_grpc.GatewayStub, steps: int) -> dict:
    # Serving again is health plus a Submit; jobs running again also needs the workers to
    # re-attach, so a mesh whose workers did not is still measured, and says so.
    attached = await workers_ready(stub, len(mesh.config["workers"]), SCHEDULER_WAIT_S)
    tracker = Tracker()
    ids = await submit(stub, steps, "scheduler")
    watchers = [asyncio.create_task(follow(stub, j, tracker)) for j in ids]
    try:
        if attached:
            await tracker.until(
                lambda: any(e.WhichOneof("event") == "progress" for _, _, e, _ in tracker.events)
            )
        os.kill(mesh.child_pid("scheduler"), signal.SIGKILL)
        killed = time.monotonic()
        serving = await _health_serving(mesh.scheduler) - killed
        probe = common_pb2.GenerateRequest(model=MODEL, prompt="probe", steps=1)
        while True:
            try:
                ids.append((await stub.Submit(probe, timeout=5)).job_id)
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(POLL_S)
            if time.monotonic() - killed > TRIAL_TIMEOUT_S:
                raise TimeoutError("no Submit succeeded after the scheduler restart")
        submitted = time.monotonic() - killed
        if attached:
            with contextlib.suppress(TimeoutError):
                await tracker.until(
                    lambda: tracker.first_fresh_progress(killed) > 0, SCHEDULER_WAIT_S
                )
        return {
            "workers_attached_before_kill": attached,
            "health_serving_s": round(serving, 3),
            "recovered_s": round(submitted, 3),
            # None: no job made progress within the wait (workers did not re-attach).
            "jobs_progress_again_s": _since(killed, tracker.first_fresh_progress(killed)),
        }
    finally:
        await cancel_all(stub, ids)
        for task in watchers:
            task.cancel()


async def _health_serving(address: str) -> float:
    # The mesh's own reconnect back-off: with gRPC's default (1 s, then 1.6 times longer
    # each) the poll saw the scheduler serve only at its channel's next attempt.
    async with grpc.aio.insecure_channel(address, options=RECONNECT_OPTIONS) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + TRIAL_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return time.monotonic()
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(POLL_S)
    raise TimeoutError("scheduler not SERVING again")


def _log_tails(mesh: Mesh, lines: int = 15) -> dict[str, list[str]]:
    return {
        path.stem: path.read_text(errors="replace").splitlines()[-lines:]
        for path in sorted(mesh.run_dir.glob("*.log"))
    }


def _since(start: float, at: float) -> float | None:
    return round(at - start, 3) if at else None


async def trials(mesh: Mesh, count: int, steps: int) -> dict[str, list[dict]]:
    outcomes: dict[str, list[dict]] = {"worker_sigkill": [], "scheduler_sigkill": []}
    async with grpc.aio.insecure_channel(mesh.gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        for name, trial in (
            ("worker_sigkill", worker_trial),
            ("scheduler_sigkill", scheduler_trial),
        ):
            for index in range(count):
                try:
                    outcome = await trial(mesh, stub, steps)
                except (TimeoutError, LookupError, grpc.aio.AioRpcError) as exc:
                    # The mesh's logs go with it when it stops; keep what explains the failure.
                    outcome = {"error": repr(exc), "recovered_s": None, "logs": _log_tails(mesh)}
                shown = {k: v for k, v in outcome.items() if k != "logs"}
                log(f"recovery {name} #{index + 1}: {shown}")
                outcomes[name].append(outcome)
    return outcomes


def run(options: Options) -> Result:
    result = Result("recovery", options)
    count, steps = (1, 6) if options.smoke else (3, 12)
    with options.meshes.mesh(WORKERS) as mesh:
        result.config = {
            "model": MODEL,
            "jobs_in_flight": JOBS,
            "steps": steps,
            "trials": count,
            "mesh": public_config(mesh.config),
        }
        outcomes = asyncio.run(trials(mesh, count, steps))
    for name, rows in outcomes.items():
        times = [r["recovered_s"] * 1000 for r in rows if r.get("recovered_s") is not None]
        errors = len(rows) - len(times)
        # Throughput has no meaning for a restart; the level carries the recovery times.
        entry = level(JOBS, times, errors, 0.0, phase=name, trials=rows)
        result.levels.append(entry)
    result.summary = {name: _medians(rows) for name, rows in outcomes.items()}
    plot(result)
    return result


def _medians(rows: list[dict]) -> dict[str, Any]:
    """Median seconds of every timing over the trials that produced it."""
    keys = list(dict.fromkeys(k for r in rows for k in r if k.endswith("_s")))
    medians: dict[str, Any] = {"trials": len(rows), "failed": sum("error" in r for r in rows)}
    for key in keys:
        values = [r[key] for r in rows if r.get(key) is not None]
        medians[f"{key}_median"] = round(float(np.median(values)), 3) if values else None
    return medians


def plot(result: Result) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    parts = {
        "worker_sigkill": ("requeued_s", "redispatched_s", "recovered_s"),
        "scheduler_sigkill": ("health_serving_s", "recovered_s", "jobs_progress_again_s"),
    }
    for ax, row in zip(axes, result.levels, strict=True):
        keys = parts[row["phase"]]
        for index, trial in enumerate(row["trials"]):
            # A timing that never happened is a gap in the line, not a zero.
            values = [float("nan") if trial.get(k) is None else trial[k] for k in keys]
            ax.plot(keys, values, marker="o", label=f"trial {index + 1}")
        ax.set_title(f"{row['phase']}: seconds after SIGKILL")
        ax.set_ylabel("seconds")
        ax.legend()
    fig.tight_layout()
    fig.savefig(result.plot_path, dpi=100)
    plt.close(fig)
