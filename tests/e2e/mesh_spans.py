"""What a mesh run with `telemetry.traces: file` measured: each job's queue wait at the
scheduler and, per batch, how long it held its worker and how long its steps took."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


def read_spans(folder: Path) -> list[dict]:
    spans: list[dict] = []
    for path in folder.glob("spans-*.jsonl"):
        spans.extend(json.loads(line) for line in path.read_text().splitlines() if line)
    return spans


def _interval(span: dict) -> tuple[float, float]:
    start, end = span["start_time"], span["end_time"]
    return datetime.fromisoformat(start).timestamp(), datetime.fromisoformat(end).timestamp()


@dataclass(frozen=True)
class QueueWait:
    # Wall-clock seconds: acceptance by the scheduler core, and dispatch in a batch.
    accepted: float
    dispatched: float


def queue_waits(spans: list[dict]) -> dict[str, QueueWait]:
    """Per job id, from the scheduler's `queue wait` spans (the first dispatch)."""
    waits: dict[str, QueueWait] = {}
    for span in spans:
        if span["name"] == "queue wait":
            job_id = span["attributes"]["mediamesh.job_id"]
            accepted, dispatched = _interval(span)
            if job_id not in waits or dispatched < waits[job_id].dispatched:
                waits[job_id] = QueueWait(accepted, dispatched)
    return waits


@dataclass(frozen=True)
class RealBatch:
    batch_id: str
    worker_id: str
    model: str
    job_ids: frozenset[str]
    # From the core's dispatch to the end of the scheduler's `batch` span (the RunBatch
    # stream closing): all the while the scheduler cannot give the worker anything else.
    started: float
    ended: float
    # The worker's StepDone.step_seconds summed over the batch's steps.
    step_s: float


def real_batches(spans: list[dict], waits: dict[str, QueueWait]) -> list[RealBatch]:
    """The scheduler's `batch` spans joined by batch id to the workers' `run batch` spans;
    each starts when its jobs' queue waits ended, a few ms before its span does."""
    held = {
        s["attributes"]["mediamesh.batch_id"]: s
        for s in spans
        if s["name"] == "batch" and s["resource"]["attributes"]["service.name"] == "scheduler"
    }
    batches = []
    for span in spans:
        scheduler_side = held.get(span["attributes"].get("mediamesh.batch_id", ""))
        if span["name"] != "run batch" or scheduler_side is None:
            continue
        steps = [e["attributes"] for e in span["events"] if e["name"] == "StepDone"]
        jobs = frozenset(step["mediamesh.job_id"] for step in steps)
        if not jobs or not jobs <= waits.keys():
            continue
        # Every job of a batch reports the same step_seconds; count each step once.
        one = min(jobs)
        step_s = sum(s["mediamesh.step_seconds"] for s in steps if s["mediamesh.job_id"] == one)
        attributes = scheduler_side["attributes"]
        batches.append(
            RealBatch(
                attributes["mediamesh.batch_id"],
                attributes["mediamesh.worker_id"],
                attributes["mediamesh.model"],
                jobs,
                max(waits[j].dispatched for j in jobs),
                _interval(scheduler_side)[1],
                step_s,
            )
        )
    return sorted(batches, key=lambda b: b.started)


def handoff_gaps(
    batches: list[RealBatch], waits: dict[str, QueueWait], window_s: float
) -> list[float]:
    """Seconds from a batch's end to its worker's next dispatch, counted only where a job of
    that next batch was already waiting with its batch window closed: the simulator would
    have dispatched it the instant the previous batch ended."""
    gaps = []
    last_end: dict[str, float] = {}
    for batch in batches:
        previous = last_end.get(batch.worker_id)
        last_end[batch.worker_id] = batch.ended
        if previous is None:
            continue
        first_accepted = min(waits[j].accepted for j in batch.job_ids)
        if first_accepted + window_s < previous:
            gaps.append(batch.started - previous)
    return gaps
