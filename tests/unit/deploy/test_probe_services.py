"""Readiness and liveness ask different health names: a worker that drains, or a gateway
that lost its scheduler, turns NOT_SERVING to leave rotation, and must not be restarted
for it."""

from __future__ import annotations

import pytest

from mediamesh.common.api.health import LIVENESS_SERVICE
from tests.unit.deploy.deploy_support import (
    main_container,
    mesh_workloads,
    overlays,
    render_overlay,
)


@pytest.mark.parametrize("overlay", overlays())
def test_liveness_probes_the_liveness_name_and_readiness_the_server(overlay: str) -> None:
    for workload in mesh_workloads(render_overlay(overlay)):
        name = workload["metadata"]["name"]
        container = main_container(workload)
        assert container["livenessProbe"]["grpc"].get("service") == LIVENESS_SERVICE, name
        assert container["readinessProbe"]["grpc"].get("service", "") == "", name


@pytest.mark.parametrize("overlay", overlays())
def test_startup_probes_ask_liveness_not_the_warming_server(overlay: str) -> None:
    """A worker's server as a whole stays NOT_SERVING through its warm-up (weights loaded,
    every warm-up shape compiled); a startup probe on it would have to fit all of that in its
    budget, and restart the pod when it does not. "liveness" is SERVING once the server runs."""
    probed = 0
    for workload in mesh_workloads(render_overlay(overlay)):
        name = workload["metadata"]["name"]
        startup = main_container(workload).get("startupProbe")
        if startup is None:
            continue
        probed += 1
        assert startup["grpc"].get("service") == LIVENESS_SERVICE, name
    assert probed, f"{overlay}: no workload has a startup probe"
