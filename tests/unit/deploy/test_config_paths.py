"""Every path the mesh config names is mounted where the config says, from the right source."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath

import pytest
import yaml
from deploy_support import (
    COMPOSE_FILE,
    CONFIG_DIR,
    EXTERNAL_OBJECTS,
    by_kind,
    component,
    env_of,
    find,
    flag,
    host_of,
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

from mediamesh.common.registry import load_registry, parse_registry
from mediamesh.common.settings import MeshConfig, WorkerSettings, load_mesh_config

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
        assert spec.modality == modality, (
            f"{model} is {spec.modality}, hosted by a {modality} worker"
        )


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
        assert _compose_source(mounts, config.internal_auth.token_file) == (
            "secret",
            "internal_token",
        )

    assert compose["configs"]["registry"]["file"] == "./config/models.yaml"
    scheduler = _compose_mounts(compose, services["scheduler"])
    store = _compose_source(scheduler, config.scheduler.store_path.parent)
    artifacts = _compose_source(scheduler, config.scheduler.artifact_dir)
    assert store[0] == artifacts[0] == "volume" and store != artifacts

    models = _compose_mounts(compose, services["models"])
    out_dir = flag(services["models"]["command"], "--out")
    assert Path(out_dir) == config.models_dir
    built = set(flag(services["models"]["command"], "--only").split(","))
    assert {m for w in config.workers for m in w.models} <= built
    models_volume = _compose_source(models, config.models_dir)
    assert models_volume[0] == "volume"

    for worker in config.workers:
        mounts = _compose_mounts(compose, services[worker.worker_id])
        assert _compose_source(mounts, worker.checkpoint_dir) == artifacts, worker.worker_id
        assert _compose_source(mounts, config.models_dir) == models_volume, worker.worker_id


# Kubernetes ----------------------------------------------------------------------------------

# Stand-in for gpu-prod's Secret, which the operator creates.
STAND_IN_GATEWAY_AUTH = 'api_keys:\n  - {sha256: "' + "0" * 64 + '", tenant: t}\ntenants: {t: {}}\n'


def _data(doc: dict, key: str) -> str:
    if doc["kind"] == "Secret" and key in doc.get("data", {}):
        return base64.b64decode(doc["data"][key]).decode()
    if key in doc.get("stringData", {}):
        return doc["stringData"][key]
    return doc["data"][key]


def _read(
    docs: tuple[dict, ...], overlay: str, workload: dict, container: dict, path: str
) -> str | None:
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
    assert key, f"{workload['metadata']['name']}: {path}: {kind} volume does not project it"
    if (kind, name) in EXTERNAL_OBJECTS.get(overlay, set()):
        return None
    return _data(find(docs, kind, name), key)


def _pod_env(workload: dict, container: dict) -> dict[str, str]:
    """The container's env as the kubelet would set it, for a made-up pod name and IP."""
    downward = {
        "metadata.name": f"{workload['metadata']['name']}-5d8f7c9b4-x2x7q",
        "status.podIP": "10.1.2.3",
    }
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        if "valueFrom" in entry:
            env[entry["name"]] = downward[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[entry["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], entry["value"])
    return env


def _expand(argv: list[str], env: dict[str, str]) -> list[str]:
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], arg) for arg in argv]


@dataclass
class Effective:
    """What a mesh container reads: its config (as the CLI loads it) and its env."""

    config: MeshConfig
    env: dict[str, str]
    base: MeshConfig


# Scratch space for the init container scripts, shared by the tests of this module.
_SCRATCH = tempfile.TemporaryDirectory(prefix="mediamesh-deploy-")


@cache
def _effective(overlay: str, name: str) -> Effective:
    """Loads the main container's config; where an init container writes it, runs that init
    container's script on the rendered ConfigMap and Secret first."""
    docs = render_overlay(overlay)
    workload = find(docs, "Deployment", name)
    tmp_path = Path(_SCRATCH.name) / overlay / name
    tmp_path.mkdir(parents=True, exist_ok=True)
    container = main_container(workload)
    env = _pod_env(workload, container)
    path = env["MEDIAMESH_CONFIG"]
    assert flag(container["command"], "--config") in (None, path), name
    mount, _ = mount_for(workload, container, path)
    if "emptyDir" not in mount.volume:
        text = _read(docs, overlay, workload, container, path)
        config = MeshConfig.model_validate(yaml.safe_load(text))
        return Effective(config, env, config)

    writers = [
        c
        for c in pod_spec(workload).get("initContainers", [])
        if path in c["command"] and mount_for(workload, c, path)[0].volume is mount.volume
    ]
    assert len(writers) == 1, f"{name}: {path} is on an emptyDir no init container writes"
    (init,) = writers
    assert not mount_for(workload, init, path)[0].read_only
    argv = _expand(init["command"], _pod_env(workload, init))
    assert argv[0] == "python", f"{name}: init container {init['name']} runs {argv[0]}"
    local: list[str] = []
    for i, arg in enumerate(argv[1:]):
        if not arg.startswith("/"):
            local.append(arg)
            continue
        target = tmp_path / f"{i}-{PurePosixPath(arg).name}"
        if arg != path:
            content = _read(docs, overlay, workload, init, arg)
            if content is None:
                assert arg.endswith("gateway-auth.yaml"), f"{name}: {arg} comes from outside"
                content = STAND_IN_GATEWAY_AUTH
            target.write_text(content)
        local.append(str(target))
    out = local[argv[1:].index(path)]
    subprocess.run([sys.executable, *local], check=True, timeout=60)
    # render_config.py BASE OUT [options]
    base_text = _read(docs, overlay, workload, init, argv[2])
    base = MeshConfig.model_validate(yaml.safe_load(base_text))
    return Effective(load_mesh_config(Path(out)), env, base)


def _claim_mounted_at(workload: dict, container: dict, path: Path) -> str:
    mount, _ = mount_for(workload, container, str(path))
    assert "persistentVolumeClaim" in mount.volume, (
        f"{workload['metadata']['name']}: {path} is not on a PersistentVolumeClaim"
    )
    return mount.volume["persistentVolumeClaim"]["claimName"]


def _worker_settings(effective: Effective) -> WorkerSettings:
    """The settings `mediamesh worker` starts from: the `workers` entry of its id."""
    worker_id = effective.env["MEDIAMESH_WORKER_ID"]
    chosen = [w for w in effective.config.workers if w.worker_id == worker_id]
    assert chosen, (
        f"no workers entry for {worker_id}: the worker would fall back to built-in defaults "
        "(relative checkpoint_dir on a read-only root filesystem)"
    )
    return chosen[0]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_config_registry_and_token_are_mounted(overlay):
    docs = render_overlay(overlay)
    for workload in mesh_workloads(docs):
        container = main_container(workload)
        effective = _effective(overlay, workload["metadata"]["name"])
        config = effective.config
        registry_text = _read(docs, overlay, workload, container, str(config.registry_path))
        parse_registry(yaml.safe_load(registry_text), "registry ConfigMap")
        token = _read(docs, overlay, workload, container, str(config.internal_auth.token_file))
        assert token is None or token.strip()
        # Only the gateway's auth and the worker's own entry differ from the shared config.
        exclude = {"gateway"} if component(workload) == "gateway" else {"workers"}
        assert config.model_dump(exclude=exclude) == effective.base.model_dump(exclude=exclude)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_gateway_gets_the_secret_api_keys(overlay):
    effective = _effective(overlay, "mediamesh-gateway")
    assert effective.config.gateway.api_keys, "the gateway config has no API keys"
    assert not effective.base.gateway.api_keys, "API key hashes belong in the Secret"
    assert host_of(effective.config.gateway.scheduler_address) == "mediamesh-scheduler"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_state_artifacts_and_checkpoints_are_on_claims(overlay):
    docs = render_overlay(overlay)
    scheduler = find(docs, "Deployment", "mediamesh-scheduler")
    config = _effective(overlay, scheduler["metadata"]["name"]).config
    container = main_container(scheduler)
    store = _claim_mounted_at(scheduler, container, config.scheduler.store_path.parent)
    artifacts = _claim_mounted_at(scheduler, container, config.scheduler.artifact_dir)
    assert store != artifacts
    for worker in workers(docs):
        settings = _worker_settings(_effective(overlay, worker["metadata"]["name"]))
        assert settings.checkpoint_dir.is_absolute()
        assert _inside(settings.checkpoint_dir, config.scheduler.artifact_dir)
        claim = _claim_mounted_at(worker, main_container(worker), settings.checkpoint_dir)
        assert claim == artifacts, worker["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_workers_drain_with_their_own_settings(overlay):
    docs = render_overlay(overlay)
    for worker in workers(docs):
        effective = _effective(overlay, worker["metadata"]["name"])
        settings = _worker_settings(effective)
        period = pod_spec(worker)["terminationGracePeriodSeconds"]
        # After the preStop drain, SIGTERM drains again with drain_grace_s (quick by then,
        # but it must not outlast the pod's grace period either).
        assert settings.drain_grace_s < period, worker["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_models_are_built_where_workers_load_them(overlay):
    docs = render_overlay(overlay)
    for worker in workers(docs):
        name = worker["metadata"]["name"]
        config = _effective(overlay, worker["metadata"]["name"]).config
        builders = [
            c
            for c in pod_spec(worker).get("initContainers", [])
            if c["command"][:3] == ["mediamesh", "models", "build"]
        ]
        assert len(builders) == 1, f"{name}: expected one `mediamesh models build` init container"
        (builder,) = builders
        argv = _expand(builder["command"], _pod_env(worker, builder))
        assert Path(flag(argv, "--out")) == config.models_dir
        hosted = _pod_env(worker, main_container(worker))["MEDIAMESH_MODELS"]
        assert flag(argv, "--only") == hosted, f"{name}: builds {flag(argv, '--only')}"
        built, _ = mount_for(worker, builder, str(config.models_dir))
        loaded, _ = mount_for(worker, main_container(worker), str(config.models_dir))
        assert built.volume is loaded.volume and "emptyDir" in built.volume


def test_secret_keys_match_what_pods_project():
    """cpu-dev's generated Secret has every key the pods ask for (gpu-prod's is external)."""
    docs = render_overlay("cpu-dev")
    (secret,) = [
        s for s in by_kind(docs, "Secret") if s["metadata"]["name"].startswith("mediamesh-secrets")
    ]
    wanted: set[str] = set()
    for workload in mesh_workloads(docs):
        for volume in pod_spec(workload)["volumes"]:
            if volume.get("secret", {}).get("secretName") == secret["metadata"]["name"]:
                wanted.update(item["key"] for item in volume["secret"]["items"])
    assert wanted == set(secret["data"]) == {"internal-token", "gateway-auth.yaml"}
