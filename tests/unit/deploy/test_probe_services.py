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
