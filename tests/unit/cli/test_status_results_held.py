"""`mediamesh status` says which tenants hold the most stored results, in readable units."""

from __future__ import annotations

import pytest

from mediamesh.cli.status_table import RESULT_TENANTS_SHOWN, bytes_text, render
from mediamesh.common.generated.v1 import scheduler_pb2


def results_line(status: scheduler_pb2.MeshStatus) -> str:
    return next(line for line in render(status).splitlines() if line.startswith("RESULTS HELD"))


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (5 * 1024**3, "5.0 GiB"),
        (3 * 1024**5, "3072.0 TiB"),
    ],
)
def test_bytes_read_in_binary_units(count: int, text: str) -> None:
    assert bytes_text(count) == text


def test_the_tenants_holding_most_come_first_and_the_rest_are_counted() -> None:
    held = {f"t{n:02d}": (n + 1) * 1024 for n in range(RESULT_TENANTS_SHOWN + 2)}
    line = results_line(scheduler_pb2.MeshStatus(result_bytes_by_tenant=held))
    assert line.startswith("RESULTS HELD  t11=12.0 KiB t10=11.0 KiB t09=10.0 KiB")
    assert "t01=" not in line and line.endswith("(and 2 more tenants)")


def test_no_results_held_says_none() -> None:
    assert results_line(scheduler_pb2.MeshStatus()) == "RESULTS HELD  none"
