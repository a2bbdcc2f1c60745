"""The kubelet's service-link variables are not misspelt settings; real misspellings still are.

A pod that keeps enableServiceLinks (any ordinary pod a user runs `mediamesh status` from)
gets, for Service mediamesh-gateway, MEDIAMESH_GATEWAY_PORT=tcp://10.0.0.1:50051 and the
rest of Kubernetes' documented set."""

from __future__ import annotations

from typing import get_args

import pytest

from mediamesh.common.settings import ConfigError, MeshConfig, load_mesh_config


def kubelet_links(service: str, ports: dict[str, int], ip: str = "10.0.0.1") -> dict[str, str]:
    """The variables the kubelet sets for `service` (port name -> number), as Kubernetes
    documents them; an IPv6 cluster IP is bracketed in the URLs."""
    prefix = service.upper().replace("-", "_")
    host = f"[{ip}]" if ":" in ip else ip
    first = next(iter(ports.values()))
    env = {
        f"{prefix}_SERVICE_HOST": ip,
        f"{prefix}_SERVICE_PORT": str(first),
        f"{prefix}_PORT": f"tcp://{host}:{first}",
    }
    for name, number in ports.items():
        env[f"{prefix}_SERVICE_PORT_{name.upper()}"] = str(number)
        link = f"{prefix}_PORT_{number}_TCP"
        env[link] = f"tcp://{host}:{number}"
        env[f"{link}_PROTO"] = "tcp"
        env[f"{link}_PORT"] = str(number)
        env[f"{link}_ADDR"] = ip
    return env


def test_the_mesh_services_links_are_not_refused():
    environ = {
        **kubelet_links("mediamesh-gateway", {"grpc": 50051, "http": 8080, "metrics": 9401}),
        **kubelet_links("mediamesh-scheduler", {"grpc": 50052}, ip="fd00::12"),
        "MEDIAMESH_GATEWAY__PORT": "50061",
    }
    config = load_mesh_config(None, environ=environ)
    assert config.gateway.port == 50061
    assert config.scheduler.port == MeshConfig().scheduler.port


def test_links_of_a_service_named_after_any_setting_are_not_refused():
    """Service mediamesh-gateway-http gives MEDIAMESH_GATEWAY_HTTP_PORT=tcp://..., shaped
    like gateway.http_port; every section and field is tried as such a name."""
    for section, info in MeshConfig.model_fields.items():
        # A section is a model, or a model or None (the worker's).
        models = [info.annotation, *get_args(info.annotation)]
        inner = [f for m in models for f in getattr(m, "model_fields", {})]
        for field in ["", *inner]:
            service = "-".join(p for p in ("mediamesh", section, field) if p).replace("_", "-")
            load_mesh_config(None, environ=kubelet_links(service, {"grpc": 50051}))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MEDIAMESH_GATEWAY_PORT", "50051"),
        ("MEDIAMESH_GATEWAY_HTTP_PORT", "8080"),
        # The kubelet writes the cluster IP, never a name: this is someone's typo.
        ("MEDIAMESH_GATEWAY_PORT", "tcp://gateway:50051"),
        ("MEDIAMESH_WORKER_WORKER_ID", "tcp://10.0.0.1:50051"),
    ],
)
def test_a_misspelt_setting_is_still_refused(name: str, value: str):
    with pytest.raises(ConfigError, match=f"env {name}: not a setting; did you mean"):
        load_mesh_config(None, environ={name: value})
