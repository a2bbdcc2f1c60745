"""deploy/docker-compose.yml: valid against the Compose spec and wired the way the mesh runs."""

from __future__ import annotations

import json

import jsonschema
import pytest
from deploy_support import COMPOSE_FILE, DEPLOY, SCHEMAS, flag, load_compose, load_yaml

from mediamesh.common.registry import load_registry
from mediamesh.common.settings import load_mesh_config

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


def test_workers_drain_before_stop(compose):
    for name in WORKERS:
        service = compose["services"][name]
        (hook,) = service["pre_stop"]
        assert hook["command"][:2] == ["mediamesh", "drain"]
        grace = float(flag(hook["command"], "--grace-s"))
        stop = service["stop_grace_period"]
        assert stop.endswith("s") and grace < float(stop[:-1])


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
