"""Every path the mesh config names is mounted where the config says, from the right source."""

from __future__ import annotations

import ast
from pathlib import Path, PurePosixPath

import pytest
import yaml
from deploy_support import (
    COMPOSE_FILE,
    CONFIG_DIR,
    INTERNAL_TLS_SECRET,
    ROOT,
    STAND_IN_SECRET,
    all_containers,
    by_kind,
    component,
    effective,
    effective_worker,
    expand,
    find,
    flag,
    host_of,
    load_compose,
    main_container,
    mesh_workloads,
    mount_for,
    object_data,
    overlays,
    pod_env,
    pod_spec,
    read_mounted,
    render_overlay,
    service_links,
    workers,
)

from mediamesh.common.registry import Registry, load_registry, parse_registry
from mediamesh.common.settings import load_mesh_config

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
            for model in effective_worker(overlay, worker["metadata"]["name"]).models:
                hosted[model] = modality
    for worker in load_mesh_config(CONFIG_DIR / "mesh.yaml", environ={}).workers:
        for model in worker.models:
            hosted.setdefault(model, registry.get(model).modality if registry.get(model) else "?")
    for model, modality in hosted.items():
        spec = registry.get(model)
        assert spec is not None, f"{model} is hosted by a worker but missing from the registry"
        assert spec.modality == modality, (
            f"{model} is {spec.modality}, hosted by a {modality} worker"
        )


def _known_to_the_builder() -> set[str]:
    """BUILDERS and BUILTIN of services/worker/models/build.py, read from the source:
    importing it would import torch and diffusers for a check of names."""
    tree = ast.parse((ROOT / "services/worker/models/build.py").read_text())
    names: set[str] = set()
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id in ("BUILDERS", "BUILTIN"):
            assert isinstance(node.value, ast.Dict | ast.Set), target.id
            keys = node.value.keys if isinstance(node.value, ast.Dict) else node.value.elts
            names.update(ast.literal_eval(key) for key in keys if key is not None)
    assert names, "no BUILDERS found in services/worker/models/build.py"
    return names


def _builds(argv: list[str]) -> set[str]:
    """The models a `mediamesh models build --only a,b` command line writes (or skips as
    builtin: they need no files)."""
    only = set(filter(None, flag(argv, "--only").split(",")))
    unknown = only - _known_to_the_builder()
    assert not unknown, f"`models build` has no builder for {sorted(unknown)}"
    return only


def _served(registry: Registry, built_where_hosted: dict[str, set[str]], where: str) -> None:
    """Every registry model is hosted by a worker whose models step built it: a model no
    worker runs is accepted, queues forever and counts as demand for a pool that never
    serves it."""
    for spec in registry.models:
        assert spec.name in built_where_hosted, f"{where}: no worker hosts {spec.name}"
        if "{models_dir}" in spec.source:
            assert spec.name in built_where_hosted[spec.name], (
                f"{where}: {spec.name} is hosted but its files are never built"
            )


def test_compose_serves_every_model_of_its_registry():
    compose = load_compose()
    registry = load_registry(COMPOSE_FILE.parent / compose["configs"]["registry"]["file"])
    config = load_mesh_config(COMPOSE_FILE.parent / compose["configs"]["mesh"]["file"], environ={})
    built = _builds(compose["services"]["models"]["command"])
    served = {model: built for worker in config.workers for model in worker.models}
    _served(registry, served, "compose")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_serves_every_model_of_its_registry(overlay):
    docs = render_overlay(overlay)
    (config_map,) = [d for d in by_kind(docs, "ConfigMap") if "models.yaml" in d.get("data", {})]
    registry = parse_registry(yaml.safe_load(object_data(config_map, "models.yaml")), overlay)
    served: dict[str, set[str]] = {}
    for worker in workers(docs):
        (builder,) = [
            c for c in pod_spec(worker).get("initContainers", []) if c["name"] == "models"
        ]
        argv = [expand(arg, pod_env(docs, overlay, worker, builder)) for arg in builder["command"]]
        for model in effective_worker(overlay, worker["metadata"]["name"]).models:
            served.setdefault(model, set()).update(_builds(argv))
    _served(registry, served, overlay)


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
    config = load_mesh_config(COMPOSE_FILE.parent / config_source, environ={})
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


def _claim_mounted_at(workload: dict, container: dict, path: Path) -> str:
    mount, _ = mount_for(workload, container, str(path))
    assert "persistentVolumeClaim" in mount.volume, (
        f"{workload['metadata']['name']}: {path} is not on a PersistentVolumeClaim"
    )
    return mount.volume["persistentVolumeClaim"]["claimName"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_pods_read_the_shared_config_as_it_is(overlay):
    """No init container writes a pod's config: every pod reads the ConfigMap's file and
    differs from the others only through MEDIAMESH_* environment variables."""
    docs = render_overlay(overlay)
    for workload in mesh_workloads(docs):
        name = workload["metadata"]["name"]
        for init in pod_spec(workload).get("initContainers", []):
            assert init["command"][:3] == ["mediamesh", "models", "build"], (
                f"{name}: init container {init['name']} runs {init['command'][:2]}"
            )
        config_path = effective(overlay, name).env["MEDIAMESH_CONFIG"]
        mount, _ = mount_for(workload, main_container(workload), config_path)
        assert "configMap" in mount.volume, f"{name}: {config_path} is not the ConfigMap's"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_config_registry_and_token_are_mounted(overlay):
    docs = render_overlay(overlay)
    for workload in mesh_workloads(docs):
        container = main_container(workload)
        loaded = effective(overlay, workload["metadata"]["name"])
        config = loaded.config
        registry_text = read_mounted(docs, overlay, workload, container, str(config.registry_path))
        parse_registry(yaml.safe_load(registry_text), "registry ConfigMap")
        token = read_mounted(
            docs, overlay, workload, container, str(config.internal_auth.token_file)
        )
        assert token is None or token.strip()
        # The environment changes only the gateway's auth and the worker's own section.
        exclude = {"gateway"} if component(workload) == "gateway" else {"worker"}
        assert config.model_dump(exclude=exclude) == loaded.file_only.model_dump(exclude=exclude)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_internal_calls_use_mutual_tls_from_the_operators_secret(overlay):
    docs = render_overlay(overlay)
    for workload in mesh_workloads(docs):
        name = workload["metadata"]["name"]
        container = main_container(workload)
        tls = effective(overlay, name).config.internal_tls
        assert tls.ca_file and tls.cert_file and tls.key_file and tls.server_name, name
        for path in (tls.ca_file, tls.cert_file, tls.key_file):
            mount, _ = mount_for(workload, container, str(path))
            assert mount.volume.get("secret", {}).get("secretName") == INTERNAL_TLS_SECRET[1]
            assert mount.read_only, f"{name}: {path} is writable"
            # Projected from the Secret, whose private key no overlay renders.
            assert read_mounted(docs, overlay, workload, container, str(path)) is None


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_gateway_gets_the_secret_api_keys(overlay):
    loaded = effective(overlay, "mediamesh-gateway")
    assert loaded.config.gateway.api_keys, "the gateway config has no API keys"
    assert loaded.config.gateway.tenants, "the gateway config has no tenants"
    assert not loaded.file_only.gateway.api_keys, "API key hashes belong in the Secret"
    assert host_of(loaded.config.gateway.scheduler_address) == "mediamesh-scheduler"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_config_loads_in_a_pod_with_service_links(overlay, tmp_path):
    """`mediamesh status` from an ordinary pod of the namespace: the kubelet gives it every
    Service's link variables (MEDIAMESH_GATEWAY_PORT=tcp://...), which are not settings."""
    docs = render_overlay(overlay)
    gateway = find(docs, "Deployment", "mediamesh-gateway")
    config_path = effective(overlay, "mediamesh-gateway").env["MEDIAMESH_CONFIG"]
    text = read_mounted(docs, overlay, gateway, main_container(gateway), config_path)
    assert text is not None
    (tmp_path / "mesh.yaml").write_text(text)
    links = service_links(docs)
    assert links["MEDIAMESH_GATEWAY_PORT"].startswith("tcp://")
    config = load_mesh_config(tmp_path / "mesh.yaml", environ=links)
    assert host_of(config.gateway.scheduler_address) == "mediamesh-scheduler"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_gateway_replicas_share_one_result_link_secret(overlay):
    """Without it each replica signs OpenAI `url` results with a secret of its own process,
    so a link opens only on the replica that made it, and on none after a restart."""
    loaded = effective(overlay, "mediamesh-gateway")
    secret = loaded.config.gateway.http.result_link_secret
    assert secret is not None, "the gateway replicas get no gateway.http.result_link_secret"
    assert loaded.file_only.gateway.http.result_link_secret is None, "it belongs in the Secret"
    gateway = find(render_overlay(overlay), "Deployment", "mediamesh-gateway")
    (entry,) = [
        e
        for e in main_container(gateway)["env"]
        if e["name"] == "MEDIAMESH_GATEWAY__HTTP__RESULT_LINK_SECRET"
    ]
    assert entry["valueFrom"]["secretKeyRef"]["name"].startswith("mediamesh-secrets")
    assert not entry["valueFrom"]["secretKeyRef"].get("optional"), "a gateway would start alone"


def test_compose_gateway_keeps_its_result_link_secret_across_restarts():
    compose = load_compose()
    assert compose["services"]["gateway"].get("restart", "no") != "no"
    config = load_mesh_config(COMPOSE_FILE.parent / compose["configs"]["mesh"]["file"], environ={})
    assert config.gateway.http.result_link_secret is not None


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_workers_are_named_after_their_pod(overlay):
    for worker in workers(render_overlay(overlay)):
        loaded = effective(overlay, worker["metadata"]["name"])
        assert loaded.file_only.worker is not None, (
            "no `worker` section: pods would fall back to built-in defaults "
            "(relative checkpoint_dir on a read-only root filesystem)"
        )
        settings = effective_worker(overlay, worker["metadata"]["name"])
        assert settings.worker_id.startswith(worker["metadata"]["name"] + "-")
        assert settings.advertise_address == f"10.1.2.3:{settings.port}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_state_artifacts_and_checkpoints_are_on_claims(overlay):
    docs = render_overlay(overlay)
    scheduler = find(docs, "Deployment", "mediamesh-scheduler")
    config = effective(overlay, scheduler["metadata"]["name"]).config
    container = main_container(scheduler)
    store = _claim_mounted_at(scheduler, container, config.scheduler.store_path.parent)
    artifacts = _claim_mounted_at(scheduler, container, config.scheduler.artifact_dir)
    assert store != artifacts
    for worker in workers(docs):
        settings = effective_worker(overlay, worker["metadata"]["name"])
        assert settings.checkpoint_dir.is_absolute()
        assert _inside(settings.checkpoint_dir, config.scheduler.artifact_dir)
        claim = _claim_mounted_at(worker, main_container(worker), settings.checkpoint_dir)
        assert claim == artifacts, worker["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_workers_drain_with_their_own_settings(overlay):
    docs = render_overlay(overlay)
    for worker in workers(docs):
        settings = effective_worker(overlay, worker["metadata"]["name"])
        period = pod_spec(worker)["terminationGracePeriodSeconds"]
        # After the preStop drain, SIGTERM drains again with drain_grace_s (quick by then,
        # but it must not outlast the pod's grace period either).
        assert settings.drain_grace_s < period, worker["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_models_are_built_where_workers_load_them(overlay):
    docs = render_overlay(overlay)
    for worker in workers(docs):
        name = worker["metadata"]["name"]
        config = effective(overlay, name).config
        builders = [
            c
            for c in pod_spec(worker).get("initContainers", [])
            if c["command"][:3] == ["mediamesh", "models", "build"]
        ]
        assert len(builders) == 1, f"{name}: expected one `mediamesh models build` init container"
        (builder,) = builders
        builder_env = pod_env(docs, overlay, worker, builder)
        argv = [expand(arg, builder_env) for arg in builder["command"]]
        assert Path(flag(argv, "--out")) == config.models_dir
        hosted = effective_worker(overlay, name).models
        assert hosted, f"{name} hosts no models"
        assert flag(argv, "--only") == ",".join(hosted), f"{name}: builds {flag(argv, '--only')}"
        built, _ = mount_for(worker, builder, str(config.models_dir))
        loaded, _ = mount_for(worker, main_container(worker), str(config.models_dir))
        assert built.volume is loaded.volume and "emptyDir" in built.volume


def test_secret_keys_match_what_pods_use():
    """cpu-dev's generated Secret has every key the pods ask for, as files or as environment
    variables, and no other (gpu-prod's is external)."""
    docs = render_overlay("cpu-dev")
    (secret,) = [
        s for s in by_kind(docs, "Secret") if s["metadata"]["name"].startswith("mediamesh-secrets")
    ]
    wanted: set[str] = set()
    for workload in mesh_workloads(docs):
        for volume in pod_spec(workload)["volumes"]:
            if volume.get("secret", {}).get("secretName") == secret["metadata"]["name"]:
                wanted.update(item["key"] for item in volume["secret"]["items"])
        for container in all_containers(workload):
            for entry in container.get("env", []):
                ref = entry.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    assert ref["name"] == secret["metadata"]["name"]
                    wanted.add(ref["key"])
    assert wanted == set(secret["data"]) == set(STAND_IN_SECRET)
