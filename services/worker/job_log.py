"""Log lines about a worker's failed jobs, each naming its job, batch, code and trace.

Hosts fail jobs in the device thread, where only the jobs' parameters are at hand: the
batch id and the trace the batch belongs to (the RunBatch call's) are set around the
host's call by the runtime (`batch_logging`), and read back here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from mediamesh.common.errors import MeshError, StatusCode
from mediamesh.common.telemetry import is_server_fault, log_job


@dataclass(frozen=True)
class BatchLogContext:
    batch_id: str = ""
    # W3C headers of the trace the batch was sent in (that of its first job).
    trace_carrier: Mapping[str, str] = field(default_factory=dict)


_NO_BATCH = BatchLogContext()
_current_batch: ContextVar[BatchLogContext] = ContextVar("worker_batch_log", default=_NO_BATCH)


@contextmanager
def batch_logging(batch_id: str, trace_carrier: Mapping[str, str]) -> Iterator[None]:
    """Lines logged inside (in this thread) name `batch_id` and its trace."""
    token = _current_batch.set(BatchLogContext(batch_id, trace_carrier))
    try:
        yield
    finally:
        # The device threads are pooled: a context left set would name this batch in
        # the next batch's lines.
        _current_batch.reset(token)


def current_batch() -> BatchLogContext:
    return _current_batch.get()


def code_of(exc: BaseException) -> StatusCode:
    """The status a job ended by `exc` fails with: a MeshError's own, else INTERNAL."""
    return exc.code if isinstance(exc, MeshError) else StatusCode.INTERNAL


def log_failed_jobs(
    logger: logging.Logger, model: str, job_ids: Iterable[str], exc: BaseException
) -> None:
    """One line per job that `exc` failed.

    The caller's fault (a MeshError with a code such as INVALID_ARGUMENT or
    FAILED_PRECONDITION, e.g. an adapter that fits no layer) is a WARNING without traceback:
    nothing here is broken. Anything else is an ERROR; its traceback goes with the first
    job's line only, since every job of the group failed at the same place and a batch of
    16 would print it 16 times.
    """
    batch = current_batch()
    code = code_of(exc)
    expected = isinstance(exc, MeshError) and not is_server_fault(code)
    level = logging.WARNING if expected else logging.ERROR
    for index, job_id in enumerate(job_ids):
        log_job(
            logger,
            f"job failed on {model}",
            batch.trace_carrier,
            level,
            exc_info=None if expected or index > 0 else exc,
            job_id=job_id,
            batch_id=batch.batch_id,
            model=model,
            code=code.value,
            error=exc.message if isinstance(exc, MeshError) else f"{type(exc).__name__}: {exc}",
        )
