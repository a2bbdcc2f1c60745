"""deploy/k8s: every overlay renders, validates, and has the shape the mesh needs."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest
from deploy_support import (
    EXTERNAL_OBJECTS,
    K8S_VERSION,
    MESH_IMAGES,
    REQUIRED_OVERLAYS,
    STOP_MARGIN_S,
    all_containers,
    by_kind,
    component,
    effective,
    effective_worker,
    find,
    flag,
    health_port,
    main_container,
    mesh_workloads,
    overlays,
    pod_spec,
    port_of,
    render_overlay,
    worker_stop_budget,
    workers,
)

OVERLAYS = overlays()
MODALITIES = ("image", "video", "audio")
POOLS = ("on-demand", "spot")
# The shortest spot notice of the clouds we target (GCE: 30 s).
SHORTEST_SPOT_NOTICE_S = 30


def test_required_overlays_exist():
    assert set(OVERLAYS) >= REQUIRED_OVERLAYS


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates(overlay):
    docs = render_overlay(overlay)
    assert docs, f"{overlay} rendered nothing"
    for doc in docs:
        if doc["apiVersion"].startswith("keda.sh/"):
            continue  # checked against KEDA's CRD in test_keda.py
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{overlay} {name}: {exc.message} at {list(exc.absolute_path)}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            pytest.fail(f"{overlay} {name}: {exc.message}")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_namespaced_objects_share_one_namespace(overlay):
    docs = render_overlay(overlay)
    namespaces = {d["metadata"]["name"] for d in by_kind(docs, "Namespace")}
    used = {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"}
    assert len(used) == 1 and None not in used, f"{overlay}: namespaces {used}"
    assert used <= namespaces, f"{overlay}: namespace {used} is not created by the overlay"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_referenced_configmaps_secrets_and_claims_exist(overlay):
    docs = render_overlay(overlay)
    present = {(d["kind"], d["metadata"]["name"]) for d in docs}
    external = EXTERNAL_OBJECTS.get(overlay, set())
    for workload in by_kind(docs, "Deployment"):
        for volume in pod_spec(workload).get("volumes", []):
            if "configMap" in volume:
                ref = ("ConfigMap", volume["configMap"]["name"])
            elif "secret" in volume:
                ref = ("Secret", volume["secret"]["secretName"])
            elif "persistentVolumeClaim" in volume:
                ref = ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
            else:
                continue
            assert ref in present or ref in external, (
                f"{overlay} {workload['metadata']['name']}: {ref} is neither rendered nor "
                f"listed as created by the operator"
            )
    for kind, name in external:
        assert (kind, name) not in present, (
            f"{overlay}: {kind} {name} is both external and rendered"
        )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_selectors_match_their_pods(overlay):
    docs = render_overlay(overlay)
    templates = [d["spec"]["template"]["metadata"]["labels"] for d in by_kind(docs, "Deployment")]
    for deployment in by_kind(docs, "Deployment"):
        selector = deployment["spec"]["selector"]["matchLabels"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), deployment["metadata"]["name"]
        # No two Deployments may select each other's pods.
        matching = [t for t in templates if selector.items() <= t.items()]
        assert len(matching) == 1, (
            f"{deployment['metadata']['name']} selects {len(matching)} pod templates"
        )
    for obj in [*by_kind(docs, "Service"), *by_kind(docs, "PodDisruptionBudget")]:
        spec = obj["spec"]
        selector = spec["selector"].get("matchLabels", spec["selector"])
        assert any(selector.items() <= t.items() for t in templates), (
            f"{overlay} {obj['kind']} {obj['metadata']['name']} selects no pods"
        )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_env_references_are_defined_before_use(overlay):
    """`$(VAR)` in env values expands only variables listed earlier in the same container;
    in command and args, only variables of the container's env."""
    for workload in by_kind(render_overlay(overlay), "Deployment"):
        for container in all_containers(workload):
            defined: set[str] = set()
            for entry in container.get("env", []):
                for ref in re.findall(r"\$\((\w+)\)", entry.get("value", "")):
                    assert ref in defined, (
                        f"{overlay} {workload['metadata']['name']}/{container['name']}: "
                        f"{entry['name']} uses $({ref}) before it is defined"
                    )
                defined.add(entry["name"])
            argv = " ".join([*container.get("command", []), *container.get("args", [])])
            for ref in re.findall(r"\$\((\w+)\)", argv):
                # An undefined one would reach the program as the literal text "$(NAME)".
                assert ref in defined, (
                    f"{overlay} {workload['metadata']['name']}/{container['name']}: "
                    f"command uses $({ref}), which its env does not define"
                )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_mapped_by_the_overlay(overlay):
    for workload in mesh_workloads(render_overlay(overlay)):
        for container in all_containers(workload):
            image = container["image"]
            assert image not in MESH_IMAGES and ":" in image, (
                f"{overlay} {workload['metadata']['name']}/{container['name']}: image {image!r} "
                "is base's placeholder; map it with `images:` in the overlay"
            )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_gateway_is_replicated_and_protected(overlay):
    docs = render_overlay(overlay)
    gateway = find(docs, "Deployment", "mediamesh-gateway")
    assert gateway["spec"]["replicas"] >= 2
    pdbs = [p for p in by_kind(docs, "PodDisruptionBudget") if component(p) == "gateway"]
    assert len(pdbs) == 1 and pdbs[0]["spec"].get("minAvailable", 0) >= 1
    find(docs, "Service", "mediamesh-gateway")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_scheduler_is_a_single_instance_with_a_persistent_store(overlay):
    docs = render_overlay(overlay)
    scheduler = find(docs, "Deployment", "mediamesh-scheduler")
    assert scheduler["spec"]["replicas"] == 1
    assert scheduler["spec"]["strategy"]["type"] == "Recreate"
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod_spec(scheduler)["volumes"]
        if "persistentVolumeClaim" in v
    ]
    state = find(docs, "PersistentVolumeClaim", "mediamesh-scheduler-state")
    assert state["metadata"]["name"] in claims
    assert state["spec"]["accessModes"] == ["ReadWriteOnce"]
    # Not ready (a failing store) must not withdraw the only scheduler's address.
    assert find(docs, "Service", "mediamesh-scheduler")["spec"]["publishNotReadyAddresses"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_one_worker_deployment_per_modality_and_pool(overlay):
    docs = render_overlay(overlay)
    seen = set()
    for worker in workers(docs):
        labels = worker["spec"]["template"]["metadata"]["labels"]
        key = (labels["mediamesh.io/modality"], labels["mediamesh.io/pool"])
        assert worker["metadata"]["name"] == f"mediamesh-worker-{key[0]}-{key[1]}"
        settings = effective_worker(overlay, worker["metadata"]["name"])
        assert settings.pool == key[1]
        assert settings.models, f"{worker['metadata']['name']}: hosts no models"
        # KEDA owns the replica count; a fixed one here would fight it on every apply (for
        # spot pools a 0 would drain running workers on each re-apply).
        assert "replicas" not in worker["spec"], worker["metadata"]["name"]
        seen.add(key)
    assert seen == {(m, p) for m in MODALITIES for p in POOLS}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_worker_has_a_disruption_budget(overlay):
    docs = render_overlay(overlay)
    pdbs = by_kind(docs, "PodDisruptionBudget")
    for worker in workers(docs):
        labels = worker["spec"]["template"]["metadata"]["labels"]
        covering = [
            p for p in pdbs if p["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ]
        assert len(covering) == 1, f"{worker['metadata']['name']}: {len(covering)} PDBs"
        assert covering[0]["spec"].get("maxUnavailable") == 1


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_workers_drain_within_their_grace_period(overlay):
    for worker in workers(render_overlay(overlay)):
        name = worker["metadata"]["name"]
        container = main_container(worker)
        argv = container["lifecycle"]["preStop"]["exec"]["command"]
        assert argv[:2] == ["mediamesh", "drain"], f"{name}: preStop is {argv}"
        assert port_of(flag(argv, "--address")) == container["ports"][0]["containerPort"]
        grace = float(flag(argv, "--grace-s"))
        period = pod_spec(worker)["terminationGracePeriodSeconds"]
        # The preStop drain, SIGTERM's drain, the wait for the scheduler's last confirmations
        # and the exit must all fit the grace period, or the kubelet kills the worker while
        # the scheduler still holds its jobs' last events unconfirmed.
        budget = worker_stop_budget(grace, effective_worker(overlay, name).drain_grace_s)
        assert budget <= period, f"{name}: stopping may take {budget} s, the pod gets {period} s"
        if name.endswith("-spot"):
            assert period <= SHORTEST_SPOT_NOTICE_S, (
                f"{name}: {period} s of grace outlasts a {SHORTEST_SPOT_NOTICE_S} s spot notice"
            )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_gateway_finishes_streams_within_its_grace_period(overlay):
    """preStop (endpoint removal before SIGTERM), then gateway.shutdown_grace_s for the calls
    in flight, then the exit: within terminationGracePeriodSeconds."""
    gateway = find(render_overlay(overlay), "Deployment", "mediamesh-gateway")
    container = main_container(gateway)
    argv = container["lifecycle"]["preStop"]["exec"]["command"]
    assert argv[0] == "sleep" and len(argv) == 2, f"preStop is {argv}"
    pre_stop = float(argv[1])
    assert pre_stop >= 1, "no time for the endpoint removal to spread before SIGTERM"
    grace = effective(overlay, "mediamesh-gateway").config.gateway.shutdown_grace_s
    period = pod_spec(gateway)["terminationGracePeriodSeconds"]
    assert pre_stop + grace + STOP_MARGIN_S <= period, (
        f"preStop {pre_stop} s + shutdown_grace_s {grace} s + {STOP_MARGIN_S} s > {period} s"
    )


def test_spot_workers_only_run_on_spot_nodes():
    # cpu-dev drops the node selector (dev nodes are not labelled); base keeps it.
    docs = render_overlay("gpu-prod")
    for worker in workers(docs):
        spec = pod_spec(worker)
        tolerates_spot = any(
            t.get("key") == "mediamesh.io/pool" for t in spec.get("tolerations", [])
        )
        if worker["metadata"]["name"].endswith("-spot"):
            assert spec["nodeSelector"] == {"mediamesh.io/pool": "spot"}
            assert {
                "key": "mediamesh.io/pool",
                "operator": "Equal",
                "value": "spot",
                "effect": "NoSchedule",
            } in spec["tolerations"]
        else:
            assert not tolerates_spot, f"{worker['metadata']['name']} tolerates spot nodes"
            assert "mediamesh.io/pool" not in spec.get("nodeSelector", {})
    for workload in mesh_workloads(docs):
        if component(workload) != "worker":
            tolerations = pod_spec(workload).get("tolerations", [])
            assert not any(t.get("key") == "mediamesh.io/pool" for t in tolerations)


@pytest.mark.parametrize(
    ("overlay", "gpus", "device"), [("gpu-prod", 1, "cuda:0"), ("cpu-dev", 0, "cpu")]
)
def test_worker_devices(overlay, gpus, device):
    for worker in workers(render_overlay(overlay)):
        container = main_container(worker)
        resources = container["resources"]
        requested = int(resources.get("requests", {}).get("nvidia.com/gpu", 0))
        limited = int(resources.get("limits", {}).get("nvidia.com/gpu", 0))
        assert requested == limited == gpus, f"{overlay} {worker['metadata']['name']}: {resources}"
        assert effective_worker(overlay, worker["metadata"]["name"]).device == device


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_mesh_containers_have_grpc_probes(overlay):
    """The kubelet's gRPC probe speaks plaintext only: a service whose main port demands
    mutual TLS is probed on its health-only port."""
    for workload in mesh_workloads(render_overlay(overlay)):
        name = workload["metadata"]["name"]
        container = main_container(workload)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        mutual_tls = effective(overlay, name).config.internal_tls.ca_file is not None
        if component(workload) != "gateway" and mutual_tls:
            assert "health" in ports, f"{name}: mutual TLS on its gRPC port and no health port"
        probed = ports.get("health", ports["grpc"])
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"]["port"] == probed, f"{name} {probe}"
        if component(workload) == "worker":
            assert container["startupProbe"]["grpc"]["port"] == probed
        assert ports.get("health") == health_port(overlay, workload), name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_mesh_pods_run_unprivileged(overlay):
    for workload in mesh_workloads(render_overlay(overlay)):
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        for container in all_containers(workload):
            ctx = container["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False
            assert ctx["capabilities"]["drop"] == ["ALL"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_artifacts_are_shared_by_scheduler_and_workers(overlay):
    docs = render_overlay(overlay)
    claim = find(docs, "PersistentVolumeClaim", "mediamesh-artifacts")
    users = [
        w["metadata"]["name"]
        for w in mesh_workloads(docs)
        if any(
            v.get("persistentVolumeClaim", {}).get("claimName") == "mediamesh-artifacts"
            for v in pod_spec(w)["volumes"]
        )
    ]
    assert "mediamesh-scheduler" in users
    assert all(w["metadata"]["name"] in users for w in workers(docs))
    # Pods on several nodes share it, except on a single-node dev cluster.
    expected = ["ReadWriteOnce"] if overlay == "cpu-dev" else ["ReadWriteMany"]
    assert claim["spec"]["accessModes"] == expected
