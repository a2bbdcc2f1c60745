"""A receiver's `verify` answers False, and never raises, for any header a sender could make
up: a non-ASCII signature made `hmac.compare_digest` raise TypeError on str."""

from __future__ import annotations

import time

import pytest

from mediamesh.common.webhook_signing import signature, signature_header, verify

BODY = b'{"event":"completed"}'
T = 1_700_000_000
GOOD = signature("s3cret", T, BODY)


@pytest.mark.parametrize(
    "header",
    [
        f"t={T},v1=é",
        f"t={T},v1={'é' * 64}",
        f"t={T},v1={GOOD[:-1]}\u0660",  # an Arabic-Indic zero in place of the last digit
        f"t={T},v1=\udcff",  # a lone surrogate, as a lenient decoder leaves it
        f"t={T},v1={GOOD.upper()}",
        f"t={T},v1={GOOD[:-2]}",
        f"t={T},v1={GOOD}00",
        f"t={T},v1= {GOOD}",
        f"t={T},v1=",
        f"t={T}",
        f"t=\u0661\u0667\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660,v1={GOOD}",  # digits
        f"t=1_700_000_000,v1={GOOD}",
        f"t= {T},v1={GOOD}",
        f"t={'9' * 400},v1={GOOD}",
        "",
        "é=é,ü",
    ],
)
def test_malformed_signatures_verify_nothing_and_raise_nothing(header: str) -> None:
    assert verify("s3cret", header, BODY, now=T) is False


def test_the_right_header_still_verifies() -> None:
    assert verify("s3cret", signature_header("s3cret", T, BODY), BODY, now=T)
    assert verify("s3cret", f"v1={GOOD},t={T}", BODY, now=T + 10)  # in any order
    assert not verify("s3cret", f"t={T},v1={GOOD}", BODY + b" ", now=T)


def test_a_receiver_may_leave_the_time_to_the_check() -> None:
    # The README's receiver calls verify(secret, header, body): now is the current time.
    fresh = signature_header("s3cret", int(time.time()), BODY)
    assert verify("s3cret", fresh, BODY)
    assert not verify("s3cret", signature_header("s3cret", T, BODY), BODY)  # long past
