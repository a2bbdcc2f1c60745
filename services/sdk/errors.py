"""The exceptions the SDK raises: GatewayError for a call the gateway refused or could not
finish, EventLoopError for an AsyncClient used outside the event loop it belongs to."""

from __future__ import annotations

from mediamesh.common.errors import field_of as field_of


class GatewayError(Exception):
    """A failed call, without gRPC types.

    `code` is the gRPC status code name ("RESOURCE_EXHAUSTED", "UNAUTHENTICATED", ...),
    `message` the gateway's reason, and `retry_after_s` how long the gateway asked the caller
    to wait before trying again (0 when it said nothing).

    `field` is the request field the gateway refused ("steps", "image_id", "webhook.url",
    "adapters[0].scale" for an item of a list, ...) when the message names one, which it does
    as `field: reason`; else None. Branch on it rather than on the message's wording.

    `job_id` is set when the error ends the stream of a job the gateway had accepted
    (generate or watch): the job may well go on, so follow it with `watch(job_id)` or stop it
    with `cancel(job_id)` rather than generating it again. Empty otherwise.

    `idempotency_key` is the key a submit or generate sent (the caller's, or the one the SDK
    made) when the call failed before it had a job id: the gateway may have made the job
    all the same (a deadline that ran out, a connection lost), and the same call again with
    `idempotency_key=error.idempotency_key` answers that job, or makes it if it was never
    made, never a second one. Empty otherwise.
    """

    def __init__(
        self,
        code: str,
        message: str,
        retry_after_s: float = 0.0,
        *,
        job_id: str = "",
        idempotency_key: str = "",
    ) -> None:
        # The positional arguments, so that the error pickles (to a worker process and back).
        super().__init__(code, message, retry_after_s)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s
        self.field = field_of(message)
        self.job_id = job_id
        self.idempotency_key = idempotency_key

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        if not self.job_id or self.job_id in self.message:
            return text
        return f"{text} (job {self.job_id})"


class EventLoopError(RuntimeError):
    """An AsyncClient created without a running event loop, or used from another loop than
    the one it was created in (a second `asyncio.run`, another thread's loop).

    Its gRPC channel belongs to one event loop for good: create the AsyncClient inside the
    coroutine that uses it, `async with AsyncClient(...) as client:`, once per `asyncio.run`.
    """
