"""A signed result link's signature is checked as the hex digest it must be: anything else
(non-ASCII text among it) is a 403 naming `signature`, never a TypeError."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import PermissionDenied
from mediamesh.gateway.http.result_links import ResultLinks

LINKS = ResultLinks(b"s" * 32, 3600, clock=lambda: 1000.0)


@pytest.mark.parametrize(
    "signature",
    ["é" * 64, "\u0660" * 64, "A" * 64, "0" * 63, "0" * 65, "", "\x00" * 64],
    ids=["latin", "arabic-digits", "uppercase", "short", "long", "empty", "nul"],
)
def test_a_signature_that_is_no_hex_digest_is_refused_naming_it(signature: str):
    with pytest.raises(PermissionDenied, match=r"^signature: not a link's signature"):
        LINKS.check("job1", "a", "2000", signature)


def test_a_hex_signature_is_compared_and_the_right_one_opens():
    query = dict(part.split("=") for part in LINKS.query("job1", "a").split("&"))
    LINKS.check("job1", "a", query["expires"], query["signature"])
    with pytest.raises(PermissionDenied, match=r"^signature: does not match"):
        LINKS.check("job2", "a", query["expires"], query["signature"])
    with pytest.raises(PermissionDenied, match=r"^signature: does not match"):
        LINKS.check("job1", "a", query["expires"], "0" * 64)
