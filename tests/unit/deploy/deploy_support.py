"""Loading and walking the deploy files, shared by the tests in this folder."""

from __future__ import annotations

import base64
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml

from mediamesh.common.settings import MeshConfig, WorkerSettings, load_mesh_config

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
SCHEMAS = ROOT.parent / "shared" / "schemas"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
K8S = DEPLOY / "k8s"
OVERLAYS_DIR = K8S / "overlays"
CONFIG_DIR = DEPLOY / "config"

# Overlays the brief asks for; any other overlay directory is rendered and checked too.
REQUIRED_OVERLAYS = {"cpu-dev", "gpu-prod"}
# Kubernetes version the rendered objects are validated against (kubernetes-validate ships it).
K8S_VERSION = "1.30"
# Objects an overlay references but deliberately leaves to the operator to create. The
# internal TLS Secret holds a private key, so no overlay generates it, not even cpu-dev's.
INTERNAL_TLS_SECRET = ("Secret", "mediamesh-internal-tls")
EXTERNAL_OBJECTS = {
    "cpu-dev": {INTERNAL_TLS_SECRET},
    "gpu-prod": {("Secret", "mediamesh-secrets"), INTERNAL_TLS_SECRET},
}
# The mesh's own image names in base, mapped by each overlay's `images:`.
MESH_IMAGES = ("mediamesh", "mediamesh-cuda")
# Stand-ins for the keys of gpu-prod's Secret, which the operator creates.
STAND_IN_SECRET = {
    "internal-token": "stand-in-token\n",
    "gateway-api-keys.json": '[{"sha256": "' + "0" * 64 + '", "tenant": "t"}]\n',
    "gateway-tenants.json": '{"t": {}}\n',
    "gateway-result-link-secret": "stand-in-result-link-secret-of-32-or-more",
}


def overlays() -> list[str]:
    return sorted(p.parent.name for p in OVERLAYS_DIR.glob("*/kustomization.yaml"))


def kubectl() -> str:
    found = shutil.which("kubectl") or (
        "/usr/bin/kubectl" if Path("/usr/bin/kubectl").exists() else None
    )
    if found is None:
        pytest.fail(
            "kubectl is not installed: the k8s tests render deploy/k8s with `kubectl kustomize` "
            "(offline). Install kubectl >= 1.27 and rerun."
        )
    return found


@cache
def render(directory: Path) -> tuple[dict, ...]:
    """`kubectl kustomize DIR`, parsed; cached per directory for the session."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"kubectl kustomize {directory.relative_to(ROOT)} failed:\n{result.stderr}")
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def render_overlay(name: str) -> tuple[dict, ...]:
    return render(OVERLAYS_DIR / name)


def load_yaml(path: Path) -> object:
    return yaml.safe_load(path.read_text())


def load_compose() -> dict:
    compose = load_yaml(COMPOSE_FILE)
    assert isinstance(compose, dict), COMPOSE_FILE
    return compose


def by_kind(docs: tuple[dict, ...] | list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def find(docs: tuple[dict, ...] | list[dict], kind: str, name: str) -> dict:
    for doc in docs:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name} in the rendered objects")


def component(doc: dict) -> str | None:
    return doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def all_containers(workload: dict) -> list[dict]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def mesh_workloads(docs: tuple[dict, ...]) -> list[dict]:
    """Deployments that run the mediamesh image (not Prometheus)."""
    return [
        d
        for d in by_kind(docs, "Deployment")
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "mediamesh"
    ]


def workers(docs: tuple[dict, ...]) -> list[dict]:
    return [d for d in mesh_workloads(docs) if component(d) == "worker"]


def main_container(workload: dict) -> dict:
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1, f"{workload['metadata']['name']}: expected one container"
    return containers[0]


@dataclass(frozen=True)
class Mount:
    """A container mount resolved to what backs it."""

    path: str
    volume: dict
    sub_path: str | None
    read_only: bool


def mounts(workload: dict, container: dict) -> list[Mount]:
    volumes = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
    out = []
    for m in container.get("volumeMounts", []):
        assert m["name"] in volumes, f"{container['name']}: mount of unknown volume {m['name']}"
        out.append(
            Mount(m["mountPath"], volumes[m["name"]], m.get("subPath"), m.get("readOnly", False))
        )
    return out


def mount_for(workload: dict, container: dict, path: str) -> tuple[Mount, str]:
    """The deepest mount containing `path`, and the path relative to it."""
    best: Mount | None = None
    for m in mounts(workload, container):
        root = m.path.rstrip("/")
        if (path == root or path.startswith(root + "/")) and (
            best is None or len(root) > len(best.path)
        ):
            best = m
    assert best is not None, (
        f"{workload['metadata']['name']}/{container['name']}: nothing mounted at {path}"
    )
    return best, path[len(best.path.rstrip("/")) :].lstrip("/")


def projected_keys(volume: dict) -> dict[str, str] | None:
    """For a configMap/secret volume: file name -> key, or None when every key is projected."""
    source = volume.get("configMap") or volume.get("secret")
    items = source.get("items") if source else None
    if items is None:
        return None
    return {item["path"]: item["key"] for item in items}


# What a container reads -----------------------------------------------------------------


def object_data(doc: dict, key: str) -> str:
    """One key of a ConfigMap or Secret, decoded."""
    if doc["kind"] == "Secret" and key in doc.get("data", {}):
        return base64.b64decode(doc["data"][key]).decode()
    if key in doc.get("stringData", {}):
        return doc["stringData"][key]
    return doc["data"][key]


def _object_key(docs: tuple[dict, ...], overlay: str, kind: str, name: str, key: str) -> str:
    if (kind, name) in EXTERNAL_OBJECTS.get(overlay, set()):
        assert key in STAND_IN_SECRET, f"no stand-in for {kind} {name} key {key}"
        return STAND_IN_SECRET[key]
    return object_data(find(docs, kind, name), key)


def read_mounted(
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
    return object_data(find(docs, kind, name), key)


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion against the variables defined so far."""
    return re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], value)


def pod_env(
    docs: tuple[dict, ...], overlay: str, workload: dict, container: dict
) -> dict[str, str]:
    """The container's env as the kubelet would set it, for a made-up pod name and IP, with
    Secret and ConfigMap references resolved (stand-ins for an operator's Secret)."""
    downward = {
        "metadata.name": f"{workload['metadata']['name']}-5d8f7c9b4-x2x7q",
        "status.podIP": "10.1.2.3",
    }
    pod = workload["spec"]["template"]["spec"]
    # The kubelet adds every Service's docker-link variables unless the pod opts out.
    env: dict[str, str] = {} if pod.get("enableServiceLinks") is False else service_links(docs)
    for entry in container.get("env", []):
        source = entry.get("valueFrom")
        if source is None:
            env[entry["name"]] = expand(entry.get("value", ""), env)
        elif "fieldRef" in source:
            env[entry["name"]] = downward[source["fieldRef"]["fieldPath"]]
        else:
            kind = "Secret" if "secretKeyRef" in source else "ConfigMap"
            ref = source["secretKeyRef"] if kind == "Secret" else source["configMapKeyRef"]
            env[entry["name"]] = _object_key(docs, overlay, kind, ref["name"], ref["key"])
    return env


def service_links(docs: tuple[dict, ...]) -> dict[str, str]:
    """The variables the kubelet gives a pod for each Service of its namespace, with a
    made-up cluster IP: `<NAME>_SERVICE_HOST`, `<NAME>_PORT=tcp://IP:PORT` and the rest."""
    env: dict[str, str] = {}
    for doc in docs:
        if doc.get("kind") != "Service" or not doc["spec"].get("ports"):
            continue
        prefix = doc["metadata"]["name"].upper().replace("-", "_")
        ip = "10.0.0.11"
        first = doc["spec"]["ports"][0]
        env[f"{prefix}_SERVICE_HOST"] = ip
        env[f"{prefix}_SERVICE_PORT"] = str(first["port"])
        env[f"{prefix}_PORT"] = f"tcp://{ip}:{first['port']}"
        for port in doc["spec"]["ports"]:
            number, protocol = port["port"], port.get("protocol", "TCP")
            if "name" in port:
                env[f"{prefix}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(number)
            link = f"{prefix}_PORT_{number}_{protocol}"
            env[link] = f"{protocol.lower()}://{ip}:{number}"
            env[f"{link}_PROTO"] = protocol.lower()
            env[f"{link}_PORT"] = str(number)
            env[f"{link}_ADDR"] = ip
    return env


# Scratch space for the config files read out of rendered ConfigMaps.
_SCRATCH = tempfile.TemporaryDirectory(prefix="mediamesh-deploy-")


@dataclass(frozen=True)
class Effective:
    """What a mesh container runs with: its config as the CLI loads it (the file, then its
    env), the file alone, and the env."""

    config: MeshConfig
    file_only: MeshConfig
    env: dict[str, str]


@cache
def effective(overlay: str, name: str) -> Effective:
    """Loads the main container's config the way `mediamesh` does, from the ConfigMap file
    MEDIAMESH_CONFIG names and the container's environment."""
    docs = render_overlay(overlay)
    workload = find(docs, "Deployment", name)
    container = main_container(workload)
    env = pod_env(docs, overlay, workload, container)
    path = env["MEDIAMESH_CONFIG"]
    assert flag(container["command"], "--config") in (None, path), name
    text = read_mounted(docs, overlay, workload, container, path)
    assert text is not None, f"{name}: its config {path} comes from outside the overlay"
    local = Path(_SCRATCH.name) / overlay / name / "mesh.yaml"
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text(text)
    return Effective(load_mesh_config(local, environ=env), load_mesh_config(local, environ={}), env)


def effective_worker(overlay: str, name: str) -> WorkerSettings:
    """The settings `mediamesh worker` runs a worker Deployment's pod with (no flags)."""
    return effective(overlay, name).config.standalone_worker()


def health_port(overlay: str, workload: dict) -> int | None:
    """The plaintext health-only port the pod's service opens (scheduler, worker), if any."""
    name = workload["metadata"]["name"]
    role = component(workload)
    if role == "scheduler":
        return effective(overlay, name).config.scheduler.health_port
    if role == "worker":
        return effective_worker(overlay, name).health_port
    return None


# Commands -----------------------------------------------------------------------------------


def dockerfiles() -> list[Path]:
    return sorted(
        p for p in (DEPLOY / "docker").glob("Dockerfile*") if not p.name.endswith(".dockerignore")
    )


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) pairs with continuation lines joined and comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    out = []
    for line in lines:
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _exec_form(rest: str) -> list[str] | None:
    rest = rest.strip()
    if rest.startswith("["):
        return yaml.safe_load(rest)
    return None


@dataclass(frozen=True)
class Command:
    """A command line some deploy file runs, and where."""

    where: str
    argv: tuple[str, ...]


def dockerfile_commands(path: Path) -> Iterator[Command]:
    entrypoint: list[str] = []
    cmd: list[str] = []
    for word, rest in dockerfile_instructions(path):
        if word == "ENTRYPOINT":
            entrypoint = _exec_form(rest) or shlex.split(rest)
        elif word == "CMD":
            cmd = _exec_form(rest) or shlex.split(rest)
        elif word == "HEALTHCHECK":
            _, _, check = rest.partition("CMD ")
            argv = _exec_form(check) or shlex.split(check)
            yield Command(f"{path.name} HEALTHCHECK", tuple(argv))
    yield Command(f"{path.name} ENTRYPOINT+CMD", tuple(entrypoint + cmd))


def compose_commands(compose: dict) -> Iterator[Command]:
    for name, service in compose["services"].items():
        if not str(service.get("image", "")).startswith("mediamesh"):
            continue
        entrypoint = service.get("entrypoint", ["mediamesh"])
        command = service.get("command", [])
        if isinstance(command, str):
            command = shlex.split(command)
        yield Command(f"compose {name} command", tuple([*entrypoint, *command]))
        test = service.get("healthcheck", {}).get("test")
        if test and test[0] == "CMD":
            yield Command(f"compose {name} healthcheck", tuple(test[1:]))
        for hook in [*service.get("pre_stop", []), *service.get("post_start", [])]:
            yield Command(f"compose {name} hook", tuple(hook["command"]))


def k8s_commands(docs: tuple[dict, ...], label: str) -> Iterator[Command]:
    for workload in mesh_workloads(docs):
        for container in all_containers(workload):
            where = f"{label} {workload['metadata']['name']}/{container['name']}"
            argv = [*container.get("command", []), *container.get("args", [])]
            yield Command(where, tuple(argv))
            for hook in ("preStop", "postStart"):
                exec_ = container.get("lifecycle", {}).get(hook, {}).get("exec")
                if exec_:
                    yield Command(f"{where} {hook}", tuple(exec_["command"]))
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                exec_ = container.get(probe, {}).get("exec")
                if exec_:
                    yield Command(f"{where} {probe}", tuple(exec_["command"]))


def mediamesh_commands() -> list[Command]:
    """Every command line in deploy/ that runs the mediamesh CLI."""
    found: list[Command] = []
    for path in dockerfiles():
        found.extend(dockerfile_commands(path))
    found.extend(compose_commands(load_compose()))
    for name in overlays():
        found.extend(k8s_commands(render_overlay(name), name))
    return [c for c in found if c.argv and Path(c.argv[0]).name == "mediamesh"]


def flag(argv: tuple[str, ...] | list[str], name: str) -> str | None:
    """Value of `--name VALUE` or `--name=VALUE` in argv."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


# Stop budgets -------------------------------------------------------------------------------

# Seconds a stopping process needs beyond its waits: the servers' own stop (the worker's
# gRPC server takes 1 s), closing model hosts and channels, the interpreter's exit.
STOP_MARGIN_S = 3.0


def worker_stop_budget(prestop_grace_s: float, drain_grace_s: float) -> float:
    """The longest a worker can take to stop, from its pre-stop hook to its exit: the hook's
    `mediamesh drain --grace-s` (the worker answers when its jobs checkpointed or the grace ran
    out), then SIGTERM's drain with `worker.drain_grace_s` (jobs still running get that again),
    then up to SETTLE_WAIT_S for the scheduler to confirm the last events, then the exit."""
    from mediamesh.worker.main import SETTLE_WAIT_S

    return prestop_grace_s + drain_grace_s + SETTLE_WAIT_S + STOP_MARGIN_S


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def host_of(address: str) -> str:
    return address.rsplit(":", 1)[0]


# ---- metrics the deploy files' PromQL may name -----------------------------------------

# Modules whose prometheus_client objects are every series the services export.
METRIC_MODULES = (
    "mediamesh.common.metrics",
    "mediamesh.scheduler.metrics",
    "mediamesh.worker.metrics",
    "mediamesh.gateway.http.request_metrics",
    "mediamesh.gateway.metrics",
)
# Labels Prometheus adds to every scraped series (the two configs' target labels).
TARGET_LABELS = frozenset(
    {"instance", "job", "namespace", "pod", "component", "modality", "mediamesh_pool"}
)


def metric_definitions() -> dict[str, set[str]]:
    """Exposed series name -> label names, from the services' prometheus_client objects."""
    import importlib

    from prometheus_client.metrics import MetricWrapperBase

    exposed: dict[str, set[str]] = {}
    for module_name in METRIC_MODULES:
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if not isinstance(value, MetricWrapperBase):
                continue
            name, labels = value._name, set(value._labelnames)
            if value._type == "counter":
                exposed[f"{name}_total"] = labels
            elif value._type == "histogram":
                for suffix in ("_sum", "_count"):
                    exposed[name + suffix] = labels
                exposed[f"{name}_bucket"] = labels | {"le"}
            else:
                exposed[name] = labels
    return exposed


def unknown_names(expr: str, exposed: dict[str, set[str]]) -> str:
    """What in `expr` the services do not export (a metric, or a label of the metrics it
    names); empty when every name is real."""
    metrics = set(re.findall(r"\bmediamesh_\w+", expr))
    if not metrics:
        return f"no mediamesh metric in {expr!r}"
    labels_available = set(TARGET_LABELS) | {"le"}
    for metric in sorted(metrics):
        if metric not in exposed:
            return f"{metric} is not defined by the services"
        labels_available |= exposed[metric]
    selectors = re.findall(r"\{([^}]*)\}", expr)
    grouped = re.findall(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)", expr)
    used = {m for s in selectors for m in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", s)}
    used |= {label.strip() for g in grouped for label in g.split(",") if label.strip()}
    unknown = used - labels_available
    return f"labels {sorted(unknown)} do not exist on {sorted(metrics)}" if unknown else ""
