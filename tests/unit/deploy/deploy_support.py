"""Loading and walking the deploy files, shared by the tests in this folder."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml

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
# Objects an overlay references but deliberately leaves to the operator to create.
EXTERNAL_OBJECTS = {"gpu-prod": {("Secret", "mediamesh-secrets")}}
# The mesh's own image names in base, mapped by each overlay's `images:`.
MESH_IMAGES = ("mediamesh", "mediamesh-cuda")


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
    return load_yaml(COMPOSE_FILE)


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


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


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


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def host_of(address: str) -> str:
    return address.rsplit(":", 1)[0]
