"""Every path the mesh config names is mounted where the config says, from the right source."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml
from support import (
    COMPOSE_FILE,
    CONFIG_DIR,
    EXTERNAL_OBJECTS,
    by_kind,
    component,
    env_of,
    find,
    flag,
    load_compose,
    main_container,
    mesh_workloads,
    mount_for,
    overlays,
    pod_spec,
    projected_keys,
    render_overlay,
    workers,
)

from services.common.registry import load_registry, parse_registry
from services.common.settings import MeshConfig, load_mesh_config

OVERLAYS = overlays()


def _inside(path: Path | str, directory: Path | str) -> bool:
    return PurePosixPath(path).is_relative_to(PurePosixPath(directory))


# Registry ------------------------------------------------------------------------------------


def test_deploy_registry_is_valid_and_covers_every_hosted_model():
    registry = load_registry(CONFIG_DIR / "models.yaml")
    hosted: dict[str, str] = {}
    for overlay in OVERLAYS:
        for worker in workers(render_overlay(overlay)):
            modality = worker["spec"]["template"]["metadata"]["labels"]["mediamesh.io/modality"]
            for model in env_of(main_container(worker))["MEDIAMESH_MODELS"].split(","):
                hosted[model] = modality
    for worker in load_mesh_config(CONFIG_DIR / "mesh.yaml").workers:
        for model in worker.models:
            hosted.setdefault(model, registry.get(model).modality if registry.get(model) else "?")
    for model, modality in hosted.items():
        spec = registry.get(model)
        assert spec is not None, f"{model} is hosted by a worker but missing from the registry"
        assert spec.modality == modality, f"{model} is {spec.modality}, hosted by a {modality} worker"


# Compose -------------------------------------------------------------------------------------


def _compose_mounts(compose: dict, service: dict) -> dict[str, tuple[str, str]]:
    """container path -> (kind, source) for a compose service."""
    out: dict[str, tuple[str, str]] = {}
    for entry in service.get("configs", []):
        out[entry["target"]] = ("config", entry["source"])
    for entry in service.get("secrets", []):
        target = entry.get("target", entry["source"])
        path = target if target.startswith("/") else f"/run/secrets/{target}"
        out[path] = ("secret", entry["source"])
    for entry in service.get("volumes", []):
        source, target = entry.split(":")[:2]
        out[target] = ("bind" if source.startswith(".") else "volume", source)
    return out


def _compose_source(mounts: dict[str, tuple[str, str]], path: Path) -> tuple[str, str]:
    candidates = [m for m in mounts if _inside(path, m)]
    assert candidates, f"nothing mounted at {path}"
    return mounts[max(candidates, key=len)]


def test_compose_paths_match_the_config():
    compose = load_compose()
    services = compose["services"]
    config_source = compose["configs"]["mesh"]["file"]
    config = load_mesh_config(COMPOSE_FILE.parent / config_source)
    for name, service in services.items():
        if not str(service.get("image", "")).startswith("mediamesh"):
            continue
        mounts = _compose_mounts(compose, service)
        env_path = service["environment"]["MEDIAMESH_CONFIG"]
        assert _compose_source(mounts, Path(env_path)) == ("config", "mesh")
        command_path = flag(service["command"], "--config")
        assert command_path in (None, env_path), f"{name}: --config {command_path} != {env_path}"
        assert _compose_source(mounts, config.registry_path) == ("config", "registry")
        assert _compose_source(mounts, config.internal_auth.token_file) == ("secret", "internal_token")

    assert compose["configs"]["registry"]["file"] == "./config/models.yaml"
    scheduler = _compose_mounts(compose, services["scheduler"])
    store = _compose_source(scheduler, config.scheduler.store_path.parent)
    artifacts = _compose_source(scheduler, config.scheduler.artifact_dir)
    assert store[0] == artifacts[0] == "volume" and store != artifacts

    models = _compose_mounts(compose, services["models"])
    out_dir = flag(services["models"]["command"], "--out")
    assert Path(out_dir) == config.models_dir
    models_volume = _compose_source(models, config.models_dir)
    assert models_volume[0] == "volume"

    for worker in config.workers:
        mounts = _compose_mounts(compose, services[worker.worker_id])
        assert _compose_source(mounts, worker.checkpoint_dir) == artifacts, worker.worker_id
        assert _compose_source(mounts, config.models_dir) == models_volume, worker.worker_id


# Kubernetes ----------------------------------------------------------------------------------


def _data(doc: dict, key: str) -> str:
    if key in doc.get("data", {}) and doc["kind"] == "Secret":
        return base64.b64decode(doc["data"][key]).decode()
    if key in doc.get("stringData", {}):
        return doc["stringData"][key]
    return doc["data"][key]


def _read(docs: tuple[dict, ...], overlay: str, workload: dict, container: dict, path: str) -> str | None:
    """Contents of `path` in the container if a ConfigMap or Secret provides it; None for a
    Secret the operator creates. Fails if nothing provides the path."""
    mount, rel = mount_for(workload, container, path)
    volume = mount.volume
    kind = "ConfigMap" if "configMap" in volume else "Secret" if "secret" in volume else None
    assert kind, f"{workload['metadata']['name']}: {path} is on a {sorted(volume)} volume"
    name = volume["configMap"]["name"] if kind == "ConfigMap" else volume["secret"]["secretName"]
    file_name = mount.sub_path or rel
    keys = projected_keys(volume)
    key = keys.get(file_name) if keys is not None else file_name
    assert key, f"{workload['metadata']['name']}: {path}: {kind} volume does not project {file_name}"
    if (kind, name) in EXTERNAL_OBJECTS.get(overlay, set()):
        return None
    return _data(find(docs, kind, name), key)


def _base_config(docs: tuple[dict, ...], overlay: str) -> MeshConfig:
    scheduler = find(docs, "Deployment", "mediamesh-scheduler")
    container = main_container(scheduler)
    text = _read(docs, overlay, scheduler, container, env_of(container)["MEDIAMESH_CONFIG"])
    return MeshConfig.model_validate(yaml.safe_load(text))


def _claim_mounted_at(workload: dict, container: dict, path: Path) -> str:
    mount, _ = mount_for(workload, container, str(path))
    assert "persistentVolumeClaim" in mount.volume, (
        f"{workload['metadata']['name']}: {path} is not on a PersistentVolumeClaim"
    )
    return mount.volume["persistentVolumeClaim"]["claimName"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_config_and_registry_are_mounted(overlay):
    docs = render_overlay(overlay)
    for workload in mesh_workloads(docs):
        container = main_container(workload)
        path = env_of(container)["MEDIAMESH_CONFIG"]
        assert flag(container["command"], "--config") in (None, path)
        if component(workload) == "gateway":
            continue  # rendered by its init container: test_gateway_config_merges_the_secret
        config = MeshConfig.model_validate(yaml.safe_load(_read(docs, overlay, workload, container, path)))
        registry_text = _read(docs, overlay, workload, container, str(config.registry_path))
        parse_registry(yaml.safe_load(registry_text), "registry ConfigMap")
        token = _read(docs, overlay, workload, container, str(config.internal_auth.token_file))
        assert token is None or token.strip()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_state_and_artifacts_are_on_claims(overlay):
    docs = render_overlay(overlay)
    config = _base_config(docs, overlay)
    scheduler = find(docs, "Deployment", "mediamesh-scheduler")
    container = main_container(scheduler)
    store = _claim_mounted_at(scheduler, container, config.scheduler.store_path.parent)
    artifacts = _claim_mounted_at(scheduler, container, config.scheduler.artifact_dir)
    assert store != artifacts
    (template,) = config.workers
    assert _inside(template.checkpoint_dir, config.scheduler.artifact_dir)
    for worker in workers(docs):
        claim = _claim_mounted_at(worker, main_container(worker), template.checkpoint_dir)
        assert claim == artifacts, worker["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_models_are_built_where_workers_load_them(overlay):
    docs = render_overlay(overlay)
    config = _base_config(docs, overlay)
    for worker in workers(docs):
        name = worker["metadata"]["name"]
        builders = [
            c for c in pod_spec(worker).get("initContainers", []) if c["command"][:3] == ["mediamesh", "models", "build"]
        ]
        assert len(builders) == 1, f"{name}: expected one `mediamesh models build` init container"
        (builder,) = builders
        assert Path(flag(builder["command"], "--out")) == config.models_dir
        built, _ = mount_for(worker, builder, str(config.models_dir))
        loaded, _ = mount_for(worker, main_container(worker), str(config.models_dir))
        assert built.volume is loaded.volume and "emptyDir" in built.volume


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_gateway_config_merges_the_secret(overlay, tmp_path):
    """Runs the gateway's init container script on the rendered ConfigMap and Secret."""
    docs = render_overlay(overlay)
    gateway = find(docs, "Deployment", "mediamesh-gateway")
    (init,) = pod_spec(gateway)["initContainers"]
    assert init["command"][:2] == ["python", "-c"]
    script, base_path, auth_path, out_path = init["command"][2:]
    container = main_container(gateway)
    assert env_of(container)["MEDIAMESH_CONFIG"] == out_path
    # The gateway reads the file from the same volume the init container wrote it to.
    written, _ = mount_for(gateway, init, out_path)
    read, _ = mount_for(gateway, container, out_path)
    assert written.volume is read.volume and "emptyDir" in written.volume
    assert not written.read_only

    base_text = _read(docs, overlay, gateway, init, base_path)
    auth_text = _read(docs, overlay, gateway, init, auth_path)
    if auth_text is None:
        # The operator's Secret: stand in a well-formed one.
        assert ("Secret", "mediamesh-secrets") in EXTERNAL_OBJECTS[overlay]
        auth_text = 'api_keys:\n  - {sha256: "' + "0" * 64 + '", tenant: t}\ntenants: {t: {}}\n'
    files = {name: tmp_path / name for name in ("base.yaml", "auth.yaml", "out.yaml")}
    files["base.yaml"].write_text(base_text)
    files["auth.yaml"].write_text(auth_text)
    subprocess.run([sys.executable, "-c", script, *map(str, files.values())], check=True, timeout=60)
    merged = load_mesh_config(files["out.yaml"])
    assert merged.gateway.api_keys, "the merged gateway config has no API keys"
    assert merged.gateway.scheduler_address.startswith("mediamesh-scheduler:")
    # Everything but the gateway's auth is the shared config, unchanged.
    base = MeshConfig.model_validate(yaml.safe_load(base_text))
    assert merged.model_dump(exclude={"gateway"}) == base.model_dump(exclude={"gateway"})
    # The token is mounted for the gateway container, too.
    token = _read(docs, overlay, gateway, container, str(merged.internal_auth.token_file))
    assert token is None or token.strip()


def test_secret_keys_match_what_pods_project():
    """cpu-dev's generated Secret has every key the pods ask for (gpu-prod's is external)."""
    docs = render_overlay("cpu-dev")
    (secret,) = [s for s in by_kind(docs, "Secret") if s["metadata"]["name"].startswith("mediamesh-secrets")]
    wanted: set[str] = set()
    for workload in mesh_workloads(docs):
        for volume in pod_spec(workload)["volumes"]:
            if volume.get("secret", {}).get("secretName") == secret["metadata"]["name"]:
                wanted.update(item["key"] for item in volume["secret"]["items"])
    assert wanted == set(secret["data"]) == {"internal-token", "gateway-auth.yaml"}
