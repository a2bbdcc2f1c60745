"""Ports for test and benchmark meshes: pytest-xdist's processes draw from disjoint shares."""

from __future__ import annotations

import pytest

from bench.launcher import _own_share

PORTS = range(20768, 32768)


def test_each_xdist_process_gets_a_disjoint_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    shares = []
    for index in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        shares.append(set(_own_share(PORTS)))
    assert all(len(share) == 4000 for share in shares)
    assert not (shares[0] & shares[1] or shares[1] & shares[2] or shares[0] & shares[2])
    assert set().union(*shares) <= set(PORTS)


def test_outside_xdist_the_whole_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert _own_share(PORTS) == PORTS
