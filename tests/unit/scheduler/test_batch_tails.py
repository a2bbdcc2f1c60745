"""The tail model: seconds per job after the last step, averaged, scaled by batch size."""

from __future__ import annotations

import pytest

from mediamesh.scheduler.core.batch_tails import BatchTails


def test_unknown_until_observed_then_scaled_by_the_batch_size():
    tails = BatchTails()
    assert tails.expected_s("m", 4) is None
    tails.observe("m", 4, 0.2)
    assert tails.expected_s("m", 4) == pytest.approx(0.2)
    assert tails.expected_s("m", 8) == pytest.approx(0.4)
    assert tails.expected_s("other", 4) is None


def test_later_batches_move_the_average_a_quarter_of_the_way():
    tails = BatchTails()
    tails.observe("m", 1, 0.1)
    tails.observe("m", 1, 0.5)
    assert tails.expected_s("m", 1) == pytest.approx(0.2)
    tails.observe("m", 2, -1.0)  # a clock step back counts as no tail, never a negative one
    assert tails.expected_s("m", 1) == pytest.approx(0.15)
