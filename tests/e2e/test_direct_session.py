"""The benchmark's direct process: levels on request, a refused level leaves it usable, and
it is gone once the session ends."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from bench.direct_session import DirectSession, DirectSessionError

pytestmark = pytest.mark.e2e


def test_direct_session_measures_levels_and_ends(models_dir: Path):
    with DirectSession(models_dir, level_timeout_s=240) as session:
        pid = session.pid
        assert pid is not None
        with pytest.raises(DirectSessionError, match="unknown model 'no-such-model'"):
            session.measure("no-such-model", 1, (1,), 1)
        report = session.measure("flux-tiny", 1, (1, 2), 2, steps=1)
        assert report["model"] == "flux-tiny" and report["threads"] == 1
        assert report["params"]["steps"] == 1
        assert [s["batch_size"] for s in report["sizes"]] == [1, 2]
        assert all(s["errors"] == 0 and s["duration_s"] > 0 for s in report["sizes"])
        # A second thread count runs in the same process, with the pool resized.
        again = session.measure("flux-tiny", 2, (1,), 1, min_batches=3, steps=1)
        assert again["threads"] == 2 and again["sizes"][0]["requests"] == 3
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
