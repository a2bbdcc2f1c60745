"""The deploy files' PromQL against a real Prometheus scraping a real mesh (issue #6).

One mesh: an on-demand and a spot worker, both hosting flux-tiny. Traffic first: a finished
job, an unknown model (NOT_FOUND), and a BATCH job preempted on the spot worker by `mediamesh
drain` that then falls back to on-demand and finishes. Then a backlog no worker can take (no
worker hosts flux-small or wan-tiny, as when a KEDA pool sits at zero replicas), so every
queue's work is stable while Prometheus scrapes it: each KEDA query must return exactly one
element equal to what the scheduler reports, every dashboard query must return data, and every
service's /metrics must serve the documented families.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mediamesh.common.generated.v1 import (
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from mediamesh.common.interceptors import INTERNAL_TOKEN_KEY
from mediamesh.common.registry import DEFAULT_REGISTRY
from tests.conftest import ROOT
from tests.e2e.conftest import MeshProcess, wait_for
from tests.e2e.prometheus_server import PrometheusServer, prometheus_binary, prometheus_server
from tests.unit.deploy.queries import deploy_queries, keda_queries, scaled_objects

ALERTS_FILE = ROOT / "deploy" / "prometheus" / "alerts.yml"
# Alerts a healthy mesh must not raise, whatever the traffic above did: the services are up
# (their `up` series carry the component labels the deploy configs give them) and nothing
# failed to be stored.
QUIET_ALERTS = (
    "MediameshSchedulerDown",
    "MediameshNoGateway",
    "MediameshTargetDown",
    "MediameshJobStoreFailing",
    "MediameshResultsLost",
    "MediameshInternalErrors",
    "MediameshSchedulerLinkFlapping",
)

pytestmark = pytest.mark.e2e

WORKERS = [
    {"worker_id": "od-0", "pool": "on-demand", "models": ["flux-tiny"]},
    {"worker_id": "spot-0", "pool": "spot", "models": ["flux-tiny"]},
]
# BATCH prefers spot; once spot has no room (drained) it may run on-demand after 1 s. Every
# class is listed: a partial `placement` replaces the defaults, and a class missing from it
# fails Submit with INTERNAL (KeyError in Scheduler._placement).
SCHEDULER = {
    "placement": {
        "REALTIME": {"prefer": "on-demand", "allow": ["on-demand"]},
        "STANDARD": {"prefer": "on-demand", "allow": ["on-demand"]},
        "BATCH": {"prefer": "spot", "allow": ["spot", "on-demand"], "fallback_after_s": 1},
    }
}
# The drained job's length. At the shipped limit of 50 steps a 512x512 flux-tiny job took 2 s
# here, about what the `drain` CLI takes to start on a loaded machine: the job sometimes
# finished before the drain reached it. The test's registry allows this many.
LONG_STEPS = 200
# Queued and never dispatched: no worker hosts these models.
BACKLOG = [
    ("flux-small", common_pb2.STANDARD, 3),
    ("flux-small", common_pb2.BATCH, 3),
    ("wan-tiny", common_pb2.STANDARD, 2),
    ("wan-tiny", common_pb2.BATCH, 2),
]

# Dashboard queries that cannot return data on this mesh, and why. Checked strictly: one that
# starts returning data must be taken off this list.
NO_DATA: dict[str, str] = {}

# Families each service's /metrics must declare (as prometheus_client names them: no _total).
RPC_FAMILIES = {"mediamesh_rpc_requests", "mediamesh_rpc_latency_seconds"}
EXPECTED_FAMILIES = {
    "gateway": RPC_FAMILIES | {"mediamesh_http_requests", "mediamesh_http_request_seconds"},
    "scheduler": RPC_FAMILIES
    | {
        "mediamesh_queue_depth",
        "mediamesh_queue_work_seconds",
        "mediamesh_queue_pool_work_seconds",
        "mediamesh_queue_pool_demand_seconds",
        "mediamesh_queue_wait_seconds",
        "mediamesh_job_latency_seconds",
        "mediamesh_queue_sla_seconds",
        "mediamesh_queue_oldest_wait_seconds",
        "mediamesh_batch_size",
        "mediamesh_jobs",
        "mediamesh_device_load",
        "mediamesh_workers",
        "mediamesh_preemptions",
        "mediamesh_spot_fallbacks",
        "mediamesh_device_seconds",
        "mediamesh_cost",
    },
    "worker": RPC_FAMILIES
    | {
        "mediamesh_worker_step_seconds",
        "mediamesh_worker_batch_seconds",
        "mediamesh_worker_jobs",
        "mediamesh_worker_checkpoints",
        "mediamesh_worker_device_memory_bytes",
    },
}
_METRIC_NAME = re.compile(r"\bmediamesh_[a-z0-9_]+")
_SERIES_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


@pytest.fixture
def mesh(launch, tmp_path: Path) -> MeshProcess:
    prometheus_binary()  # fail before spending time on the mesh
    return launch(
        WORKERS,
        scheduler=SCHEDULER,
        registry_path=str(registry_with_long_jobs(tmp_path)),
        telemetry={"log_format": "json"},
    )


def registry_with_long_jobs(tmp_path: Path) -> Path:
    """The shipped registry, flux-tiny allowing LONG_STEPS."""
    registry = yaml.safe_load(DEFAULT_REGISTRY.read_text())
    flux = next(e for e in registry["models"] if e["name"] == "flux-tiny")
    flux["limits"]["max_steps"] = LONG_STEPS
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(registry))
    return path


@pytest.fixture
def prometheus(mesh: MeshProcess, tmp_path: Path) -> Iterator[PrometheusServer]:
    targets = metrics_targets(mesh)
    count = sum(len(addresses) for addresses in targets.values())
    with prometheus_server(tmp_path, targets, rule_files=[ALERTS_FILE]) as server:

        def all_up() -> bool:
            up = server.targets_up()
            return len(up) == count and all(up.values())

        wait_for(all_up, timeout=20)
        yield server


def metrics_ports(mesh: MeshProcess) -> dict[str, list[int]]:
    c = mesh.config
    return {
        "gateway": [c["gateway"]["metrics_port"]],
        "scheduler": [c["scheduler"]["metrics_port"]],
        "worker": [w["metrics_port"] for w in c["workers"]],
    }


def metrics_targets(mesh: MeshProcess) -> dict[str, list[str]]:
    return {name: [f"127.0.0.1:{p}" for p in ports] for name, ports in metrics_ports(mesh).items()}


def test_deploy_queries_against_prometheus(mesh: MeshProcess, prometheus: PrometheusServer):
    with grpc.insecure_channel(mesh.gateway) as channel:
        gateway = gateway_pb2_grpc.GatewayStub(channel)
        generate_traffic(mesh, gateway)
        for model, priority, count in BACKLOG:
            for seed in range(count):
                request = common_pb2.GenerateRequest(
                    model=model, prompt=f"backlog {seed}", steps=20, seed=seed, priority=priority
                )
                gateway.Submit(request, timeout=30)

    check_keda_queries(mesh, prometheus)
    check_dashboard_queries(prometheus)
    check_metrics_endpoints(mesh)
    check_alerting_rules(prometheus)
    check_json_logs(mesh)


def check_json_logs(mesh: MeshProcess) -> None:
    """With `log_format: json` every line of every service's log is one JSON object: the
    model libraries' progress bars and notices and Python's warnings included."""
    logs = sorted(mesh.run_dir.glob("*.log"))
    assert len(logs) >= 4, logs
    for path in logs:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            try:
                assert isinstance(json.loads(line), dict)
            except (ValueError, AssertionError):
                raise AssertionError(
                    f"{path.name}:{number} is not a JSON object: {line!r}"
                ) from None


# ---- traffic ---------------------------------------------------------------------------------


def generate_traffic(mesh: MeshProcess, gateway: gateway_pb2_grpc.GatewayStub) -> None:
    """A finished job, a NOT_FOUND, HTTP requests, a spot preemption with its on-demand
    fallback."""
    finish_one(gateway, seed=1)
    http = f"http://127.0.0.1:{mesh.config['gateway']['http_port']}"
    assert httpx.get(f"{http}/v1/models", timeout=10).status_code in (200, 401)

    # Errors by code and Error ratio need code != "OK".
    with pytest.raises(grpc.RpcError) as error:
        gateway.Submit(common_pb2.GenerateRequest(model="no-such-model", prompt="x"), timeout=10)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND

    # A BATCH job runs on spot (it prefers spot), the spot worker drains, the job is
    # checkpointed, falls back to on-demand (spot has no room) and finishes there.
    long_job = common_pb2.GenerateRequest(
        model="flux-tiny",
        prompt="preempt me",
        steps=LONG_STEPS,
        width=512,
        height=512,
        seed=2,
        priority=common_pb2.BATCH,
    )
    job_id = gateway.Submit(long_job, timeout=30).job_id
    wait_for(lambda: job_info(gateway, job_id).step >= 1, timeout=60, interval=0.05)
    spot = next(w for w in mesh.config["workers"] if w["pool"] == "spot")
    drained = mesh.cli(
        "drain", "--address", f"127.0.0.1:{spot['port']}", "--config", str(mesh.config_path)
    )
    assert drained.returncode == 0, drained.stderr
    assert job_id in drained.stdout, drained.stdout
    events = list(gateway.Watch(gateway_pb2.WatchRequest(job_id=job_id), timeout=120))
    assert events[-1].state == common_pb2.SUCCEEDED, events[-1]
    assert job_info(gateway, job_id).attempts == 2

    # A second finished job of the same labels, so latency histograms have a rate.
    finish_one(gateway, seed=3)

    scheduler = scrape(mesh.config["scheduler"]["metrics_port"])
    assert sample(scheduler, "mediamesh_preemptions_total", pool="spot") == 1
    assert sample(scheduler, "mediamesh_spot_fallbacks_total", queue="image") == 1
    worker = scrape(spot["metrics_port"])
    assert sample(worker, "mediamesh_worker_checkpoints_total", reason="preempted") == 1


def finish_one(gateway: gateway_pb2_grpc.GatewayStub, seed: int) -> None:
    request = common_pb2.GenerateRequest(model="flux-tiny", prompt="a fox", steps=2, seed=seed)
    events = list(gateway.Generate(request, timeout=60))
    assert events[-1].state == common_pb2.SUCCEEDED, events[-1]


def job_info(gateway: gateway_pb2_grpc.GatewayStub, job_id: str) -> common_pb2.JobInfo:
    return gateway.GetJob(gateway_pb2.GetJobRequest(job_id=job_id), timeout=10)


# ---- KEDA ------------------------------------------------------------------------------------


def check_keda_queries(mesh: MeshProcess, prometheus: PrometheusServer) -> None:
    """Each trigger: one element, equal to the scheduler's gauge and, per queue, GetStatus."""
    pools = {
        f"keda:{o['metadata']['name']}": (
            o["metadata"]["labels"]["mediamesh.io/modality"],
            o["metadata"]["labels"]["mediamesh.io/pool"],
        )
        for o in scaled_objects()
    }
    queries = keda_queries()
    assert len(queries) == len(pools) == 6

    def observe() -> tuple[dict, dict, dict]:
        """(scheduler gauges, KEDA query values, scheduler gauges again)."""
        before = pool_demand_gauges(mesh)
        seen = {}
        for q in queries:
            result = prometheus.query(q.expr)
            assert len(result) == 1, f"{q.source}: {q.expr} returned {result}"
            seen[q.source] = float(result[0]["value"][1])
        return before, seen, pool_demand_gauges(mesh)

    def agree(before: dict, seen: dict, after: dict) -> bool:
        return (
            before == after
            and all(before[(q, p)] > 0 for q in ("image", "video") for p in ("on-demand", "spot"))
            and all(
                math.isclose(v, before[pools[s]], rel_tol=1e-6, abs_tol=1e-9)
                for s, v in seen.items()
            )
        )

    # The gauges are set every 0.2 s and Prometheus holds the last scrape (<= 1 s old):
    # retry until both show the backlog. Agreeing on the values from before the backlog
    # arrived proves nothing.
    deadline = time.monotonic() + 15
    before, seen, after = observe()
    while not agree(before, seen, after) and time.monotonic() < deadline:
        time.sleep(0.5)
        before, seen, after = observe()
    detail = {s: (seen[s], before.get(p), after.get(p)) for s, p in pools.items()}
    assert agree(before, seen, after), (
        f"KEDA value != scheduler gauge (prom, before, after): {detail}"
    )
    gauges = after

    # The demand is real: both pools of image and video carry work; audio has none.
    for queue in ("image", "video"):
        for pool in ("on-demand", "spot"):
            assert gauges[(queue, pool)] > 0, (queue, pool, gauges)

    # Nothing runs now (the backlog's models have no worker), so demand is all queued work.
    status = mesh_status(mesh)
    for queue in status.queues:
        assert queue.running == 0, queue
        by_pool = [v for s, v in seen.items() if pools[s][0] == queue.name]
        assert len(by_pool) == 2, (queue.name, seen)
        assert math.isclose(sum(by_pool), queue.work_s, rel_tol=1e-6, abs_tol=1e-6), (
            queue.name,
            queue.work_s,
            seen,
        )


def pool_demand_gauges(mesh: MeshProcess) -> dict[tuple[str, str], float]:
    families = scrape(mesh.config["scheduler"]["metrics_port"])
    return {
        (s.labels["queue"], s.labels["pool"]): s.value
        for s in families["mediamesh_queue_pool_demand_seconds"].samples
    }


def mesh_status(mesh: MeshProcess) -> scheduler_pb2.MeshStatus:
    token = mesh.config["internal_auth"]["token"]
    with grpc.insecure_channel(mesh.scheduler) as channel:
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        return stub.GetStatus(
            scheduler_pb2.GetStatusRequest(), metadata=[(INTERNAL_TOKEN_KEY, token)], timeout=10
        )


# ---- dashboard -------------------------------------------------------------------------------


def check_dashboard_queries(prometheus: PrometheusServer) -> None:
    """Every deploy query but NO_DATA's returns a non-empty result (rate() needs two scrapes)."""
    queries = deploy_queries()
    assert set(NO_DATA) <= set(queries), "NO_DATA lists a query the deploy files no longer use"
    results: dict[str, list[dict]] = {}

    def all_have_data() -> bool:
        for expr in queries:
            if not results.get(expr):
                results[expr] = prometheus.query(expr)
        return all(results[e] for e in queries if e not in NO_DATA)

    with contextlib.suppress(AssertionError):  # reported below, query by query
        wait_for(all_have_data, timeout=20, interval=1)
    empty = [e for e in queries if not results.get(e) and e not in NO_DATA]
    assert not empty, "dashboard/KEDA queries with no data:\n" + "\n".join(empty)
    now_with_data = [e for e in NO_DATA if results.get(e)]
    assert not now_with_data, f"these return data now; take them off NO_DATA: {now_with_data}"


# ---- alerting rules --------------------------------------------------------------------


def check_alerting_rules(prometheus: PrometheusServer) -> None:
    """deploy/prometheus/alerts.yml loads into a real Prometheus, every rule evaluates over
    the mesh's real series without error, and a healthy mesh raises none of QUIET_ALERTS."""
    expected = {rule["alert"] for g in yaml.safe_load(ALERTS_FILE.read_text())["groups"]
                for rule in g["rules"]}  # fmt: skip

    def all_evaluated() -> bool:
        rules = prometheus.alerting_rules()
        return {r["name"] for r in rules} == expected and all(
            r["health"] != "unknown" for r in rules
        )

    wait_for(all_evaluated, timeout=20, interval=1)
    rules = {rule["name"]: rule for rule in prometheus.alerting_rules()}
    broken = {name: r["lastError"] for name, r in rules.items() if r["health"] != "ok"}
    assert not broken, f"alerting rules that fail to evaluate: {broken}"
    raised = {
        name: rules[name]["state"] for name in QUIET_ALERTS if rules[name]["state"] != "inactive"
    }
    assert not raised, f"a healthy mesh raised {raised}"


# ---- /metrics --------------------------------------------------------------------------------


def scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        content_type = response.headers.get("Content-Type", "")
        body = response.read().decode()
    assert content_type.startswith("text/plain; version="), content_type  # exposition format
    return {f.name: f for f in text_string_to_metric_families(body)}


def sample(families: dict, name: str, **labels: str) -> float | None:
    """The value of the sample `name` whose labels include `labels`; None if absent."""
    family = families.get(_family(name)) or families.get(name)
    for s in family.samples if family else ():
        if s.name == name and labels.items() <= s.labels.items():
            return s.value
    return None


def check_metrics_endpoints(mesh: MeshProcess) -> None:
    """Each service serves the exposition format with its families; nothing used is missing."""
    exported: set[str] = set()
    for service, service_ports in metrics_ports(mesh).items():
        for port in service_ports:
            families = scrape(port)
            missing = EXPECTED_FAMILIES[service] - set(families)
            assert not missing, f"{service} :{port} /metrics lacks {sorted(missing)}"
            # The gRPC calls of the traffic above were counted.
            assert families["mediamesh_rpc_requests"].samples, (service, port)
            exported |= set(families)

    # Every metric the deploy files or the README name is exported by some service.
    readme = (ROOT / "README.md").read_text().split("## Observability", 1)[1].split("\n## ", 1)[0]
    used = {_family(n) for q in deploy_queries() for n in _METRIC_NAME.findall(q)}
    documented = {_family(n) for n in _METRIC_NAME.findall(readme)}
    assert not used - exported, f"deploy files use metrics nobody exports: {used - exported}"
    assert not documented - exported, f"README documents unexported: {documented - exported}"


def _family(series: str) -> str:
    for suffix in _SERIES_SUFFIXES:
        if series.endswith(suffix):
            return series.removesuffix(suffix)
    return series
