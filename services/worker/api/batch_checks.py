"""What a batch needs before this worker takes it, and which ended batches it may report.

A batch with no id, model or jobs was accepted and answered OK with no events, and its
empty id was remembered as ended: at drain the worker reported it among its ended batches,
the scheduler refused that whole message (an empty id breaks `limits.BATCH_ID`) and ended
the worker's session, and the worker never had its real batches confirmed.
"""

from __future__ import annotations

import logging

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.generated.v1 import worker_pb2
from mediamesh.common.limits import BATCH_ID

log = logging.getLogger(__name__)


def check_run(run: worker_pb2.RunBatchRequest, prefix: str = "") -> None:
    """InvalidArgument naming the first of `batch_id`, `model` and `jobs` left empty
    (`prefix` is the path to `run`, such as "run." in a BatchLink request)."""
    if not run.batch_id:
        raise InvalidArgument(f"{prefix}batch_id: required (the scheduler's id for the batch)")
    if not run.model:
        raise InvalidArgument(f"{prefix}model: required (the model the batch runs)")
    if not run.jobs:
        raise InvalidArgument(f"{prefix}jobs: required (at least 1 job)")


def reportable(batch_ids: list[str]) -> list[str]:
    """The ids the scheduler's bounds accept in a BatchesEnded message. It refuses the
    whole message for one bad id and ends the session, so such an id is left out here,
    whatever recorded it."""
    kept = []
    for batch_id in batch_ids:
        try:
            BATCH_ID.check("batch_ids", batch_id)
        except InvalidArgument as exc:
            log.warning("not reporting ended batch %r to the scheduler: %s", batch_id, exc)
            continue
        kept.append(batch_id)
    return kept
