"""Every port the deploy files name is the one services/common/settings.py defaults to."""

from __future__ import annotations

import pytest
import yaml
from deploy_support import (
    CONFIG_DIR,
    DEPLOY,
    by_kind,
    component,
    dockerfile_instructions,
    dockerfiles,
    effective_worker,
    find,
    flag,
    health_port,
    host_of,
    load_compose,
    load_yaml,
    main_container,
    mediamesh_commands,
    mesh_workloads,
    overlays,
    pod_spec,
    port_of,
    render_overlay,
)

from mediamesh.common.settings import (
    GatewaySettings,
    SchedulerSettings,
    WorkerSettings,
    load_mesh_config,
)

GATEWAY, SCHEDULER, WORKER = GatewaySettings(), SchedulerSettings(), WorkerSettings()
GRPC = {"gateway": GATEWAY.port, "scheduler": SCHEDULER.port, "worker": WORKER.port}
METRICS = {
    "gateway": GATEWAY.metrics_port,
    "scheduler": SCHEDULER.metrics_port,
    "worker": WORKER.metrics_port,
}
OVERLAYS = overlays()


def _role(service_name: str) -> str:
    return "worker" if service_name.startswith("worker") else service_name


@pytest.mark.parametrize("path", ["mesh.yaml", "mesh-k8s.yaml"])
def test_config_files_use_the_default_ports(path):
    config = load_mesh_config(CONFIG_DIR / path, environ={})
    every_worker = [*config.workers, *([config.worker] if config.worker else [])]
    assert config.gateway.port == GATEWAY.port
    assert config.gateway.metrics_port == GATEWAY.metrics_port
    assert config.gateway.http_port == GATEWAY.http_port
    assert config.scheduler.port == SCHEDULER.port
    assert config.scheduler.metrics_port == SCHEDULER.metrics_port
    assert port_of(config.gateway.scheduler_address) == SCHEDULER.port
    for worker in every_worker:
        assert worker.port == WORKER.port
        assert worker.metrics_port == WORKER.metrics_port
        assert port_of(worker.scheduler_address) == SCHEDULER.port
        if worker.advertise_address:
            assert port_of(worker.advertise_address) == WORKER.port
    for section in (config.gateway, config.scheduler, *every_worker):
        assert section.host == "0.0.0.0", "containers must bind every interface"
        # /metrics defaults to loopback; Prometheus scrapes from its own container or pod.
        assert section.metrics_host == "0.0.0.0", "Prometheus could not reach /metrics"


def test_command_addresses_target_the_right_port():
    """healthcheck and drain run inside the container they check."""
    checked = 0
    for command in mediamesh_commands():
        address = flag(command.argv, "--address")
        if address is None:
            continue
        subcommand = command.argv[1]
        assert host_of(address) == "127.0.0.1" or address.startswith("$"), command
        if address.startswith("$"):
            continue  # the Dockerfile's HEALTHCHECK_ADDRESS, checked below
        port = port_of(address)
        if subcommand == "drain":
            assert port == WORKER.port, command
        else:
            assert port in GRPC.values(), command
            assert port == GRPC[_role(_owner(command.where))], command
        checked += 1
    assert checked >= 10, "expected healthchecks and drains in compose and k8s"


def _owner(where: str) -> str:
    # "compose worker-image healthcheck" or "<overlay> mediamesh-worker-image-spot/worker ..."
    if where.startswith("compose "):
        return where.split()[1]
    name = where.split()[1].split("/")[0]
    return name.removeprefix("mediamesh-").split("-")[0]


def test_dockerfiles_expose_the_default_ports():
    for path in dockerfiles():
        instructions = dockerfile_instructions(path)
        exposed = {
            int(p.split("/")[0]) for w, rest in instructions if w == "EXPOSE" for p in rest.split()
        }
        assert set(GRPC.values()) | set(METRICS.values()) <= exposed, path.name
        # The plaintext health-only ports the k8s config opens (scheduler, worker) too.
        k8s = load_mesh_config(CONFIG_DIR / "mesh-k8s.yaml", environ={})
        health = {k8s.scheduler.health_port, *(w.health_port for w in [k8s.worker] if w)}
        assert None not in health and health <= exposed, (path.name, sorted(health - exposed))
        assert GATEWAY.http_port in exposed, path.name
        env = " ".join(rest for w, rest in instructions if w == "ENV")
        address = env.split("HEALTHCHECK_ADDRESS=")[1].split()[0]
        assert port_of(address) in (GATEWAY.port, WORKER.port), path.name


def test_compose_ports():
    services = load_compose()["services"]
    # Loopback only: the dev API key is published (test_compose.py checks every service).
    assert services["gateway"]["ports"] == [
        f"127.0.0.1:{GATEWAY.port}:{GATEWAY.port}",
        f"127.0.0.1:{GATEWAY.http_port}:{GATEWAY.http_port}",
    ]
    prometheus = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    targets = {
        target
        for job in prometheus["scrape_configs"]
        for group in job["static_configs"]
        for target in group["targets"]
    }
    expected = {f"{name}:{METRICS[_role(name)]}" for name in services if _role(name) in METRICS}
    assert expected <= targets
    unknown = {t for t in targets if host_of(t) not in services and host_of(t) != "localhost"}
    assert not unknown, f"Prometheus scrapes services compose does not run: {unknown}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_ports(overlay):
    docs = render_overlay(overlay)
    for workload in mesh_workloads(docs):
        role = component(workload)
        container = main_container(workload)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        expected = {"grpc": GRPC[role], "metrics": METRICS[role]}
        if health_port(overlay, workload) is not None:
            expected["health"] = health_port(overlay, workload)
        if role == "gateway":
            expected["http"] = GATEWAY.http_port
        assert ports == expected, workload["metadata"]["name"]
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert int(annotations["prometheus.io/port"]) == METRICS[role]
        if role == "worker":
            settings = effective_worker(overlay, workload["metadata"]["name"])
            assert settings.port == WORKER.port
            assert settings.metrics_port == WORKER.metrics_port
            assert settings.advertise_address and port_of(settings.advertise_address) == WORKER.port
            scheduler_host = host_of(settings.scheduler_address)
            assert port_of(settings.scheduler_address) == SCHEDULER.port
            service = find(docs, "Service", scheduler_host)
            assert SCHEDULER.port in [p["port"] for p in service["spec"]["ports"]]
    for service in by_kind(docs, "Service"):
        role = component(service)
        if role not in GRPC:
            continue
        ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
        expected_service = {"grpc": (GRPC[role], "grpc"), "metrics": (METRICS[role], "metrics")}
        if role == "gateway":
            expected_service["http"] = (GATEWAY.http_port, "http")
        assert ports == expected_service


def test_k8s_prometheus_scrapes_the_metrics_port_by_name():
    config = load_yaml(DEPLOY / "prometheus" / "prometheus-k8s.yml")
    (job,) = [j for j in config["scrape_configs"] if "kubernetes_sd_configs" in j]
    keeps = {
        tuple(r["source_labels"]): r["regex"]
        for r in job["relabel_configs"]
        if r.get("action") == "keep"
    }
    assert keeps[("__meta_kubernetes_pod_container_port_name",)] == "metrics"
    assert keeps[("__meta_kubernetes_pod_annotation_prometheus_io_scrape",)] == "true"
    for overlay in OVERLAYS:
        docs = render_overlay(overlay)
        for workload in mesh_workloads(docs):
            names = [
                p["name"] for c in pod_spec(workload)["containers"] for p in c.get("ports", [])
            ]
            assert names.count("metrics") == 1
        prometheus = find(docs, "Deployment", "prometheus")
        (volume,) = [v for v in pod_spec(prometheus)["volumes"] if "configMap" in v]
        config_map = find(docs, "ConfigMap", volume["configMap"]["name"])
        assert yaml.safe_load(config_map["data"]["prometheus.yml"]) == config
