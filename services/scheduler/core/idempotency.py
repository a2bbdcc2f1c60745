"""Whether a submit that repeats an idempotency key repeats the request, or asks for another.

A key names one request. Answering a different request with the earlier job would hand the
caller a result for something it did not ask for (another prompt, another model), so a key
reused with different content is refused, naming the first field that differs.
"""

from __future__ import annotations

from dataclasses import fields, replace

from mediamesh.common.generation import GenerationParams, InputImage
from mediamesh.scheduler.core.interface import NewJob
from mediamesh.scheduler.core.jobs import Job

# Compared in this order, so the field named is the one a caller most likely changed.
_PARAM_NAMES = tuple(f.name for f in fields(GenerationParams))


def conflicting_field(earlier: Job, new: NewJob) -> str | None:
    """The first field in which `new` differs from `earlier`, the job its key already names;
    None when `new` is the same request again (a retry).

    Not compared: the deadline (a retry computes its own from its timeout), the tenant's
    quota (configuration, not the request), and the seed when `new` named none (any seed
    answers a request that left it to the mesh).
    """
    if new.model != earlier.model:
        return "model"
    if new.priority != earlier.priority:
        return "priority"
    if new.delivery.result_as_url != earlier.delivery.result_as_url:
        return "result_as_url"
    if new.delivery.webhook != earlier.delivery.webhook:
        return "webhook"
    for name in _PARAM_NAMES:
        if name == "seed" and new.any_seed:
            continue
        if _value(earlier.params, name) != _value(new.params, name):
            return name
    return None


def conflict_message(earlier: Job, field_name: str) -> str:
    """Why a submit reusing `earlier`'s key is refused."""
    return (
        f"idempotency_key: {earlier.idempotency_key!r} already names job {earlier.job_id}, "
        f"whose {field_name} differs from this request's; repeat that request exactly to "
        "follow the job, or send this one with a new key"
    )


def _value(params: GenerationParams, name: str) -> object:
    value = getattr(params, name)
    if isinstance(value, InputImage):
        # Where the bytes are kept differs between a job and its retry, and an ended job
        # keeps no inline bytes; the image is the same when its digest and size are.
        return replace(value, ref="")
    return value
