"""Signed, expiring links to one job's result, for clients that fetch a URL without a key.

OpenAI's images API answers `response_format: url` with a URL its clients open as it is,
with no Authorization header; a gateway with API keys and results on local disk gave its
own key-protected result path instead, which answered 401. The link carries its tenant, an
expiry and an HMAC over both and the job id, so it opens that one result and nothing else,
until it expires. (An S3 result store presigns its own URLs; those are used instead.)
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlencode

from mediamesh.common.errors import InvalidArgument, PermissionDenied

# What `_signature` makes: a SHA-256 HMAC in lowercase hex.
_HEX_SIGNATURE = re.compile(r"[0-9a-f]{64}", re.ASCII)


@dataclass(frozen=True)
class ResultLinks:
    secret: bytes
    ttl_s: float
    clock: Callable[[], float] = field(default=time.time)

    def query(self, job_id: str, tenant: str) -> str:
        """The query string that opens `job_id`'s result as `tenant` until the link expires."""
        expires = int(self.clock() + self.ttl_s)
        signature = self._signature(job_id, tenant, expires)
        return urlencode({"tenant": tenant, "expires": expires, "signature": signature})

    def check(self, job_id: str, tenant: str, expires: str, signature: str) -> None:
        """Raises PermissionDenied unless the link was made here for `job_id` and is current."""
        try:
            expiry = int(expires)
        except ValueError:
            raise InvalidArgument(f"expires: {expires[:20]!r} is not a Unix time") from None
        if not _HEX_SIGNATURE.fullmatch(signature):
            # compare_digest takes ASCII text only: anything else raised TypeError (a 500).
            raise PermissionDenied(
                f"signature: not a link's signature (64 lowercase hex digits, got "
                f"{len(signature)} characters)"
            )
        expected = self._signature(job_id, tenant, expiry)
        if not hmac.compare_digest(expected.encode(), signature.encode()):
            raise PermissionDenied(
                "signature: does not match this link's job, tenant and expiry (or was made "
                "by another gateway: several need one gateway.http.result_link_secret)"
            )
        if self.clock() > expiry:
            raise PermissionDenied(
                f"expires: this link expired at {expiry}; fetch the job's result again for "
                "a new one"
            )

    def _signature(self, job_id: str, tenant: str, expires: int) -> str:
        message = f"{job_id}\n{tenant}\n{expires}".encode()
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()
