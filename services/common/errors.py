"""Domain errors that carry their gRPC status, mapped in one place by the server interceptor."""

from __future__ import annotations


class MeshError(Exception):
    """An error a caller should see as-is: `code` is a gRPC status code name."""

    code = "INTERNAL"

    def __init__(self, message: str, *, code: str | None = None, retry_after_s: float = 0) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.retry_after_s = retry_after_s


class InvalidArgument(MeshError):
    code = "INVALID_ARGUMENT"


class NotFound(MeshError):
    code = "NOT_FOUND"


class ResourceExhausted(MeshError):
    code = "RESOURCE_EXHAUSTED"


class Unauthenticated(MeshError):
    code = "UNAUTHENTICATED"


class PermissionDenied(MeshError):
    code = "PERMISSION_DENIED"


class FailedPrecondition(MeshError):
    code = "FAILED_PRECONDITION"


class Unavailable(MeshError):
    code = "UNAVAILABLE"


class StartupError(RuntimeError):
    """A service cannot start (a model that does not load or fit, a bad bind); exit with it."""


# Trailing metadata key with the milliseconds a rejected caller should wait before retrying.
RETRY_AFTER_KEY = "retry-after-ms"
