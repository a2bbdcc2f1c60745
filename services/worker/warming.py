"""Warm-up: each hosted model's listed shapes run once before it takes work.

At start the worker registers its models as warming (the scheduler routes nothing to it
and its health says NOT_SERVING), runs every shape of each loaded model on its device,
then registers again as warm. No batch can arrive meanwhile, so the warm-up owns the
device. A model hosted cold under residency limits is skipped then: the residency warms
it each time a batch loads it, inside that batch's turn on the device and before its
jobs run. A shape that fails is logged and skipped: the model still serves, and a request
of that shape fails as it would have anyway.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import JobFailed, JobParams, WorkerEvent
from mediamesh.worker.core.batch import BatchControl
from mediamesh.worker.models.host import ModelHost
from mediamesh.worker.residency import ResidentHost

log = logging.getLogger("mediamesh.worker")

WARMUP_JOB_PREFIX = "warmup-"


def warmup_sizes(spec: ModelSpec, batch: int) -> list[int]:
    """The batch sizes a listed shape warms: its own, or, for a model compiled per shape
    (gpu.compile with dynamic false), every size the scheduler may form (1 to max_batch,
    out-of-memory halves included), since each size compiles on its first call."""
    compiled = spec.gpu.compile
    if compiled.mode == "none" or compiled.dynamic:
        return [batch]
    return list(range(1, max(batch, spec.batching.max_batch) + 1))


def warmup_batches(spec: ModelSpec) -> list[list[JobParams]]:
    """One batch per listed shape (and batch size, see `warmup_sizes`), at the model's
    defaults where the shape leaves a field 0."""
    d = spec.defaults
    visual = spec.modality in ("image", "video")
    batches: list[list[JobParams]] = []
    for index, shape in enumerate(spec.warmup):
        generation = GenerationParams(
            prompt="warm-up",
            steps=shape.steps,
            seed=index,
            width=(shape.width or d.width) if visual else 0,
            height=(shape.height or d.height) if visual else 0,
            num_frames=(shape.num_frames or d.num_frames) if spec.modality == "video" else 0,
            duration_s=(shape.duration_s or d.duration_s) if spec.modality == "audio" else 0.0,
            guidance_scale=d.guidance_scale,
        )
        batches.extend(
            [
                JobParams(f"{WARMUP_JOB_PREFIX}{spec.name}-{index}-{n}", generation)
                for n in range(size)
            ]
            for size in warmup_sizes(spec, shape.batch)
        )
    return batches


def needs_warmup(hosts: Mapping[str, ModelHost]) -> bool:
    """Whether any hosted model lists warm-up shapes."""
    return any(host.spec.warmup for host in hosts.values())


def warm_host(host: ModelHost) -> None:
    """Runs each of `host`'s warm-up shapes once on its loaded model (blocking: call it
    off the event loop)."""
    name = host.spec.name
    for jobs in warmup_batches(host.spec):
        events: list[WorkerEvent] = []
        host.run_batch(jobs, BatchControl([j.job_id for j in jobs]), events.append)
        failures = [e for e in events if isinstance(e, JobFailed)]
        g = jobs[0].generation
        shape = f"{g.width}x{g.height}x{g.num_frames} steps={g.steps} batch={len(jobs)}"
        if failures:
            log.warning("warm-up of %s at %s failed: %s", name, shape, failures[0].message)
        else:
            log.info("warmed %s at %s", name, shape)


def run_warmups(hosts: Mapping[str, ModelHost]) -> dict[str, float]:
    """The start-up warm-up of every loaded model that lists shapes (blocking: call it off
    the event loop); returns the seconds each model's warm-up took. A cold model is left
    to warm when it loads, rather than loaded here, which would evict the others."""
    took: dict[str, float] = {}
    for name, host in hosts.items():
        if not host.spec.warmup:
            continue
        started = time.perf_counter()
        if isinstance(host, ResidentHost):
            if not host.warm_if_loaded():
                log.info("%s is hosted cold; it warms when a batch loads it", name)
                continue
        else:
            warm_host(host)
        took[name] = time.perf_counter() - started
    return took
