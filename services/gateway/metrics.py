"""The gateway's own Prometheus metrics (its HTTP face's are in http/request_metrics.py)."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import Counter, Gauge

from mediamesh.common.errors import MeshError, PayloadTooLarge, StatusCode
from mediamesh.common.registry import Registry

JOB_LINK_STREAMS = Counter(
    "mediamesh_gateway_job_link_streams",
    "JobLink streams the gateway opened to the scheduler: one for its first job, one more "
    "after each break.",
)
JOB_LINK_EXCHANGES = Gauge(
    "mediamesh_gateway_job_link_exchanges", "Jobs the gateway follows over JobLink now."
)
JOBS_REFUSED = Counter(
    "mediamesh_gateway_jobs_refused",
    "New jobs the gateway refused itself, before the scheduler saw them, by the check that "
    "refused them (a fixed set of reasons; `queue` is `unknown` for a model not in the "
    "registry). The scheduler's mediamesh_jobs_refused_total counts the rest.",
    ["queue", "reason"],
)
# The queue label of a refusal whose model names no queue, as the scheduler's.
UNKNOWN_QUEUE = "unknown"
# A refusal's reason by its status: the checks the gateway makes before submitting.
_REASONS = {
    StatusCode.NOT_FOUND: "unknown_model",
    StatusCode.INVALID_ARGUMENT: "invalid_request",
    StatusCode.PERMISSION_DENIED: "tenant_policy",
    StatusCode.RESOURCE_EXHAUSTED: "tenant_rate",
}


def init_refusals(queues: Iterable[str]) -> None:
    """Every series of JOBS_REFUSED from the start, at 0, so that a rate of refusals reads 0
    rather than no data before the first one (an unknown model has no queue of its own)."""
    for queue in queues:
        for reason in (*_REASONS.values(), "other"):
            JOBS_REFUSED.labels(queue, reason)
    JOBS_REFUSED.labels(UNKNOWN_QUEUE, "unknown_model")


def queue_of(registry: Registry, model: object) -> str:
    """The queue label a job for `model` (as a request named it, perhaps not text) is
    counted under: its modality, or UNKNOWN_QUEUE for no model in the registry."""
    spec = registry.get(model) if isinstance(model, str) else None
    return spec.modality if spec is not None else UNKNOWN_QUEUE


def refusal_reason(error: MeshError, queue: str) -> str:
    """The reason label of a job for `queue` the gateway refused with `error`. NOT_FOUND is an
    unknown model only when the model was not found (`queue` unknown); for a known model it
    names something else the request asked for (an adapter not offered), a bad request. A
    body past the size limit is a bad request too, not a tenant's rate."""
    if error.code is StatusCode.NOT_FOUND and queue != UNKNOWN_QUEUE:
        return "invalid_request"
    if isinstance(error, PayloadTooLarge):
        return "invalid_request"
    return _REASONS.get(error.code, "other")


# Refusals counted already: a check inside a span that `counting_refusals` watches counts its
# own, with what it knows of the request, and the span must not count it again.
_COUNTED: weakref.WeakSet[MeshError] = weakref.WeakSet()


def count_refused(error: MeshError, queue: str, jobs: int = 1) -> None:
    """Counts `jobs` new jobs for `queue` the gateway refused with `error` itself (a request
    for several refused as one counts each job it asked for); an error counted before is
    not counted again."""
    if error in _COUNTED:
        return
    _COUNTED.add(error)
    JOBS_REFUSED.labels(queue, refusal_reason(error, queue)).inc(jobs)


@dataclass
class Asked:
    """What a submission route has learnt so far of the jobs its request asks for: the
    queue of their model and how many. It starts at one job of no known queue, for a body
    refused before its model could be read."""

    queue: str = UNKNOWN_QUEUE
    jobs: int = 1


@contextlib.contextmanager
def counting_refusals(queue: str = UNKNOWN_QUEUE, jobs: int = 1) -> Iterator[Asked]:
    """Counts a refusal raised while a submission's body is read and checked, before the
    request reaches the DataPlane (which counts what it refuses): a body the HTTP or KServe
    faces cannot parse is a refused job as much as one the DataPlane turns down. The route
    sets the yielded `Asked` as it learns the model and the count."""
    asked = Asked(queue, jobs)
    try:
        yield asked
    except MeshError as exc:
        count_refused(exc, asked.queue, asked.jobs)
        raise
