"""deploy/k8s/keda: ScaledObjects valid against KEDA's CRD and consistent with the workers."""

from __future__ import annotations

import copy
import re
from functools import cache
from urllib.parse import urlsplit

import jsonschema
import pytest
from deploy_support import (
    CONFIG_DIR,
    DEPLOY,
    SCHEMAS,
    by_kind,
    effective_worker,
    find,
    load_yaml,
    overlays,
    render_overlay,
    workers,
)
from queries import keda_queries, scaled_objects

OVERLAYS = overlays()
CRD = SCHEMAS / "keda.sh_scaledobjects.yaml"
QUERY = re.compile(
    r'^sum\(mediamesh_queue_pool_demand_seconds\{queue="(?P<queue>[a-z]+)",pool="(?P<pool>[a-z-]+)"\}\)'
    r" or vector\(0\)$"
)


def _closed(schema: dict) -> dict:
    """The apiserver prunes fields a structural schema does not list (and `kubectl apply`
    rejects them with strict field validation); jsonschema allows them unless told."""
    schema = copy.deepcopy(schema)

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


@cache
def _validator() -> jsonschema.Draft7Validator:
    if not CRD.exists():
        pytest.fail(f"KEDA CRD not found at {CRD} (expected in ../shared/schemas/)")
    crd = load_yaml(CRD)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return jsonschema.Draft7Validator(_closed(version["schema"]["openAPIV3Schema"]))


def _sla() -> dict[str, float]:
    config = load_yaml(CONFIG_DIR / "mesh-k8s.yaml")
    return {queue: float(q["sla_s"]) for queue, q in config["scheduler"]["queues"].items()}


def test_source_scaled_objects_exist():
    assert len(scaled_objects()) == 6


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_scaled_objects_validate_against_the_crd(overlay):
    validator = _validator()
    objects = by_kind(render_overlay(overlay), "ScaledObject")
    assert objects, f"{overlay} has no ScaledObjects"
    for obj in objects:
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
        assert not errors, f"{obj['metadata']['name']}: " + "; ".join(
            f"{list(e.absolute_path)}: {e.message}" for e in errors
        )
        # The CRD's x-kubernetes-validations rule, which jsonschema cannot run.
        spec = obj["spec"]
        assert spec.get("minReplicaCount", 0) <= spec.get("maxReplicaCount", 100)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_one_scaled_object_per_worker_deployment(overlay):
    docs = render_overlay(overlay)
    targets = [o["spec"]["scaleTargetRef"] for o in by_kind(docs, "ScaledObject")]
    names = [t["name"] for t in targets]
    assert sorted(names) == sorted(w["metadata"]["name"] for w in workers(docs))
    for target in targets:
        assert target.get("kind", "Deployment") == "Deployment"
        find(docs, "Deployment", target["name"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_trigger_queries_its_own_modality_and_pool(overlay):
    docs = render_overlay(overlay)
    for obj in by_kind(docs, "ScaledObject"):
        worker = find(docs, "Deployment", obj["spec"]["scaleTargetRef"]["name"])
        labels = worker["spec"]["template"]["metadata"]["labels"]
        (trigger,) = obj["spec"]["triggers"]
        assert trigger["type"] == "prometheus"
        assert trigger.get("metricType", "AverageValue") == "AverageValue"
        match = QUERY.match(trigger["metadata"]["query"])
        assert match, f"{obj['metadata']['name']}: query {trigger['metadata']['query']!r}"
        assert match["queue"] == labels["mediamesh.io/modality"]
        assert (
            match["pool"]
            == labels["mediamesh.io/pool"]
            == effective_worker(overlay, worker["metadata"]["name"]).pool
        )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_server_address_is_the_overlays_prometheus(overlay):
    docs = render_overlay(overlay)
    for obj in by_kind(docs, "ScaledObject"):
        address = urlsplit(obj["spec"]["triggers"][0]["metadata"]["serverAddress"])
        service, namespace, *_ = address.hostname.split(".")
        assert namespace == obj["metadata"]["namespace"], (
            f"{obj['metadata']['name']}: Prometheus in {namespace}, ScaledObject in "
            f"{obj['metadata']['namespace']}"
        )
        svc = find(docs, "Service", service)
        assert address.port in [p["port"] for p in svc["spec"]["ports"]]


def test_thresholds_follow_the_queue_sla():
    """Backlog per replica: half the SLA on-demand (room for run time and scale-up), the whole
    SLA on spot (BATCH work); waking from zero at a fifth of the SLA or less."""
    sla = _sla()
    for obj in scaled_objects():
        spec = obj["spec"]
        (trigger,) = spec["triggers"]
        match = QUERY.match(trigger["metadata"]["query"])
        queue, pool = match["queue"], match["pool"]
        threshold = float(trigger["metadata"]["threshold"])
        activation = float(trigger["metadata"]["activationThreshold"])
        limit = sla[queue] / 2 if pool == "on-demand" else sla[queue]
        assert 0 < threshold <= limit, f"{obj['metadata']['name']}: threshold {threshold} > {limit}"
        assert 0 < activation <= sla[queue] / 5 and activation < threshold
        assert spec["pollingInterval"] <= max(sla[queue], 10)
        assert spec["cooldownPeriod"] >= 60
        if pool == "on-demand":
            # Cold GPU nodes take longer than the image SLA: keep one replica warm.
            assert spec["minReplicaCount"] >= 1
            assert spec["fallback"]["replicas"] >= spec["minReplicaCount"]
        else:
            assert spec["minReplicaCount"] == 0


def test_every_keda_query_is_single_valued():
    for query in keda_queries():
        assert query.single
        assert query.expr.startswith("sum(") and query.expr.endswith(" or vector(0)"), query


# ScaledObject fields newer than KEDA 2.0, with the KEDA release that introduced each: a
# cluster older than that rejects (or, without schema validation, ignores) the object.
# Path segments name nested keys; "*" walks every element of a list.
KEDA_FIELD_SINCE: dict[tuple[str, ...], tuple[int, int]] = {
    # kedacore/keda#6464, released in 2.17.
    ("spec", "fallback", "behavior"): (2, 17),
}
STATED_KEDA = re.compile(r"KEDA\s*\(?\s*>=\s*(\d+)\.(\d+)")


def _has_path(node: object, path: tuple[str, ...]) -> bool:
    if not path:
        return True
    head, rest = path[0], path[1:]
    if head == "*":
        return isinstance(node, list) and any(_has_path(item, rest) for item in node)
    return isinstance(node, dict) and head in node and _has_path(node[head], rest)


def _stated_keda_minimums() -> dict[str, tuple[int, int]]:
    """Every "KEDA >= X.Y" the deploy files state, by file and line."""
    found: dict[str, tuple[int, int]] = {}
    for path in sorted(DEPLOY.rglob("*")):
        if not path.is_file() or path.suffix not in {".yaml", ".yml", ".md"}:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in STATED_KEDA.finditer(line):
                found[f"{path.relative_to(DEPLOY)}:{number}"] = (int(match[1]), int(match[2]))
    return found


def test_stated_keda_minimum_is_one_version():
    stated = _stated_keda_minimums()
    assert stated, "no deploy file states the KEDA version it needs"
    assert len(set(stated.values())) == 1, f"the deploy files disagree: {stated}"


def test_stated_keda_minimum_covers_every_field_used():
    stated = min(_stated_keda_minimums().values())
    for obj in scaled_objects():
        for path, since in KEDA_FIELD_SINCE.items():
            if _has_path(obj, path):
                assert stated >= since, (
                    f"{obj['metadata']['name']} uses {'.'.join(path)} (KEDA >= "
                    f"{since[0]}.{since[1]}) but the deploy files state KEDA >= "
                    f"{stated[0]}.{stated[1]}"
                )
