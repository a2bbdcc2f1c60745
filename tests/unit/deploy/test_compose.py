"""deploy/docker-compose.yml: valid against the Compose spec and wired the way the mesh runs."""

from __future__ import annotations

import json

import jsonschema
import pytest
from deploy_support import (
    COMPOSE_FILE,
    DEPLOY,
    SCHEMAS,
    STOP_MARGIN_S,
    flag,
    load_compose,
    load_yaml,
    worker_stop_budget,
)

from mediamesh.cli.main import build_parser, worker_settings
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import MeshConfig, WorkerSettings, load_mesh_config

SCHEMA = SCHEMAS / "compose-spec.json"
WORKERS = {"worker-image": "image", "worker-video": "video", "worker-audio": "audio"}
EXPECTED_MODELS = {
    "worker-image": ["flux-tiny", "echo"],
    "worker-video": ["wan-tiny"],
    "worker-audio": ["stable-audio-tiny"],
}


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose()


def _mesh_config(compose: dict):
    source = compose["configs"]["mesh"]["file"]
    return load_mesh_config(COMPOSE_FILE.parent / source, environ={})


def test_validates_against_the_compose_spec(compose):
    if not SCHEMA.exists():
        pytest.fail(f"Compose schema not found at {SCHEMA} (expected in ../shared/schemas/)")
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_services(compose):
    services = compose["services"]
    assert {"models", "scheduler", "gateway", *WORKERS, "prometheus"} <= set(services)
    assert services["models"]["command"][:2] == ["models", "build"]
    assert services["models"]["restart"] == "no"


def test_files_it_mounts_exist(compose):
    base = COMPOSE_FILE.parent
    for section in ("configs", "secrets"):
        for name, entry in compose.get(section, {}).items():
            assert (base / entry["file"]).is_file(), f"{section}.{name}: {entry['file']} is missing"
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume["source"]
            if source.startswith("."):
                assert (base / source).exists(), f"{name}: {source} is missing"


def test_long_running_services_have_healthchecks(compose):
    for name, service in compose["services"].items():
        if not str(service.get("image", "")).startswith("mediamesh") or name == "models":
            continue
        test = service["healthcheck"]["test"]
        assert test[:3] == ["CMD", "mediamesh", "healthcheck"], name


def test_start_order(compose):
    services = compose["services"]
    assert services["gateway"]["depends_on"]["scheduler"]["condition"] == "service_healthy"
    for name in WORKERS:
        depends = services[name]["depends_on"]
        assert depends["scheduler"]["condition"] == "service_healthy"
        assert depends["models"]["condition"] == "service_completed_successfully"


def test_workers_host_one_modality_each(compose):
    config = _mesh_config(compose)
    registry = load_registry(COMPOSE_FILE.parent / compose["configs"]["registry"]["file"])
    entries = {w.worker_id: w for w in config.workers}
    for name, modality in WORKERS.items():
        worker_id = flag(compose["services"][name]["command"], "--worker-id")
        assert worker_id in entries, f"{name}: --worker-id {worker_id} has no entry in the config"
        entry = entries[worker_id]
        assert entry.models == EXPECTED_MODELS[name]
        for model in entry.models:
            spec = registry.get(model)
            assert spec is not None, f"{name}: {model} is not in the registry"
            assert spec.modality == modality, f"{name}: {model} is {spec.modality}"
        assert entry.host == "0.0.0.0"
        assert entry.advertise_address == f"{name}:{entry.port}"


def _seconds(duration: str) -> float:
    assert duration.endswith("s") and duration[:-1].isdigit(), duration
    return float(duration[:-1])


def _service_config(compose: dict, name: str) -> MeshConfig:
    """The config a compose service's `mediamesh` loads: the mounted file, then the
    MEDIAMESH_* variables of the service's environment."""
    env = {k: str(v) for k, v in compose["services"][name].get("environment", {}).items()}
    source = compose["configs"]["mesh"]["file"]
    return load_mesh_config(COMPOSE_FILE.parent / source, environ=env)


def _compose_worker(compose: dict, name: str) -> WorkerSettings:
    """What `mediamesh worker` runs a compose worker with: its config and its command line."""
    args = build_parser().parse_args(compose["services"][name]["command"])
    return worker_settings(_service_config(compose, name), args)


def test_workers_drain_before_stop(compose):
    for name in WORKERS:
        service = compose["services"][name]
        (hook,) = service["pre_stop"]
        assert hook["command"][:2] == ["mediamesh", "drain"]
        grace = float(flag(hook["command"], "--grace-s"))
        stop = _seconds(service["stop_grace_period"])
        budget = worker_stop_budget(grace, _compose_worker(compose, name).drain_grace_s)
        assert budget <= stop, f"{name}: stopping may take {budget} s, compose waits {stop} s"


def test_workers_run_one_torch_thread_each(compose):
    """Three CPU workers share the host: each one's torch pool is one thread, not every core
    (torch_threads 0). The setting must reach the entry --worker-id picks."""
    for name in WORKERS:
        settings = _compose_worker(compose, name)
        assert settings.worker_id == flag(compose["services"][name]["command"], "--worker-id")
        assert settings.torch_threads == 1, f"{name}: torch_threads {settings.torch_threads}"


def test_no_queue_class_waits_for_a_pool_without_workers(compose):
    """Every class's preferred pool has a compose worker for every queue, so no job sits out
    placement.fallback_after_s waiting for a pool that compose does not run."""
    config = _service_config(compose, "scheduler")
    registry = load_registry(COMPOSE_FILE.parent / compose["configs"]["registry"]["file"])
    served: set[tuple[str, str]] = set()
    for name in WORKERS:
        worker = _compose_worker(compose, name)
        for model in worker.models:
            spec = registry.get(model)
            assert spec is not None, f"{name}: {model} is not in the registry"
            served.add((spec.modality, worker.pool))
    for priority, placement in config.scheduler.placement.items():
        for queue in config.scheduler.queues:
            assert (queue, placement.prefer) in served, (
                f"{priority} jobs of the {queue} queue prefer pool {placement.prefer!r}, where "
                f"no compose worker serves {queue}: each waits "
                f"{placement.fallback_after_s} s before it falls back"
            )
            for pool in placement.allow:
                assert (queue, pool) in served or pool == placement.prefer, (priority, queue)


def test_every_published_port_is_loopback_bound(compose):
    """The dev API key and internal token are published in this repo and Grafana admits
    anonymous viewers: nothing compose publishes may listen beyond this host."""
    published = 0
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            published += 1
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", f"{name}: {port}"
                continue
            parts = str(port).split(":")
            assert len(parts) == 3 and parts[0] == "127.0.0.1", (
                f"{name}: port {port!r} is published on every interface; write "
                f'"127.0.0.1:{parts[-2] if len(parts) > 1 else parts[0]}:{parts[-1]}"'
            )
    assert published, "compose publishes no port"


def test_gateway_stops_within_compose_grace(compose):
    service = compose["services"]["gateway"]
    grace = _service_config(compose, "gateway").gateway.shutdown_grace_s
    stop = _seconds(service.get("stop_grace_period", "10s"))  # compose's default: 10 s
    assert grace + STOP_MARGIN_S <= stop, f"gateway: {grace} s of grace, compose waits {stop} s"


def test_grafana_provisioning_is_mounted(compose):
    grafana = compose["services"].get("grafana")
    assert grafana is not None
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    provisioning = load_yaml(DEPLOY / "grafana/provisioning/dashboards/mediamesh.yml")
    dashboards_dir = provisioning["providers"][0]["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    assert mounts["./grafana/mediamesh-dashboard.json"].startswith(dashboards_dir + "/")
    datasource = load_yaml(DEPLOY / "grafana/provisioning/datasources/prometheus.yml")
    (ds,) = datasource["datasources"]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090"
