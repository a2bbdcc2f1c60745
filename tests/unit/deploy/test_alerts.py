"""deploy/prometheus/alerts.yml: rules Prometheus accepts, over metrics the services export,
loaded by both deploy configs, documented, and each firing when it should and only then.

The firing cases run in promtool's rule unit tests, that is Prometheus's own rule engine over
synthetic series (`promtool test rules`), from the table below. Debian's `prometheus`
package, which `make test` installs, ships promtool.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from deploy_support import (
    COMPOSE_FILE,
    DEPLOY,
    ROOT,
    TARGET_LABELS,
    mesh_workloads,
    metric_definitions,
    overlays,
    render_overlay,
    unknown_names,
)

ALERTS_FILE = DEPLOY / "prometheus" / "alerts.yml"
RULES_PATH = "/etc/prometheus/alerts.yml"
CONFIGS = {
    "compose": DEPLOY / "prometheus" / "prometheus.yml",
    "k8s": DEPLOY / "prometheus" / "prometheus-k8s.yml",
}
SEVERITIES = {"critical", "warning"}
PROMTOOL_TIMEOUT_S = 60


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: `make system-deps` installs Debian's prometheus package"
    return found


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args],
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
        check=False,
    )


def alert_rules(path: Path = ALERTS_FILE) -> list[dict[str, Any]]:
    groups = yaml.safe_load(path.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


# ---- the rules themselves --------------------------------------------------------------


def test_promtool_accepts_the_rules():
    checked = run_promtool("check", "rules", str(ALERTS_FILE))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_alert_says_what_is_wrong_and_how_bad():
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names)) >= 10, names
    for rule in rules:
        name = rule["alert"]
        assert re.fullmatch(r"Mediamesh[A-Z]\w+", name), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert "for" in rule, f"{name}: say how long the condition must hold, even 0m"
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook"}, name
        assert annotations["runbook"] == "README.md#alerts", name


def test_alerts_name_real_metrics_and_labels():
    exposed = metric_definitions()
    for rule in alert_rules():
        expr = rule["expr"]
        if "mediamesh_" not in expr:
            # Target health alone: Prometheus's `up`, by the configs' target labels.
            assert set(re.findall(r"[a-z_]+(?=\{)", expr)) == {"up"}, expr
            used = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", expr))
            assert used <= TARGET_LABELS, (rule["alert"], used)
            continue
        problem = unknown_names(expr, exposed)
        assert not problem, f"{rule['alert']}: {problem}"


def test_the_readme_documents_every_alert():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Alerts", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    for rule in alert_rules():
        assert f"`{rule['alert']}`" in section, f"README's Alerts section lacks {rule['alert']}"


# ---- wiring ----------------------------------------------------------------------------


def test_both_prometheus_configs_load_the_rules():
    for name, path in CONFIGS.items():
        assert yaml.safe_load(path.read_text())["rule_files"] == [RULES_PATH], name


def test_promtool_accepts_the_compose_config_with_its_rules(tmp_path):
    # Only Compose's: Debian builds Prometheus without Kubernetes discovery, so its promtool
    # cannot parse prometheus-k8s.yml (the k8s tests render that one instead).
    config = yaml.safe_load(CONFIGS["compose"].read_text())
    config["rule_files"] = [str(ALERTS_FILE)]  # this tree's file, not the container's path
    copy = tmp_path / "prometheus.yml"
    copy.write_text(yaml.safe_dump(config))
    checked = run_promtool("check", "config", str(copy))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 1 rule files found" in checked.stdout, checked.stdout


def components_in_alerts() -> set[str]:
    """The `component` values the rules select on (`up{component=~"gateway|worker"}`)."""
    found: set[str] = set()
    for rule in alert_rules():
        for values in re.findall(r'component=~?"([^"]+)"', rule["expr"]):
            found |= set(values.split("|"))
    return found


def test_the_components_alerts_select_on_are_what_both_deploys_label():
    assert components_in_alerts() == {"scheduler", "gateway", "worker"}
    compose = yaml.safe_load(CONFIGS["compose"].read_text())
    labelled = {
        target["labels"]["component"]
        for job in compose["scrape_configs"]
        for target in job["static_configs"]
        if "component" in target.get("labels", {})
    }
    assert components_in_alerts() <= labelled
    for overlay in overlays():
        docs = render_overlay(overlay)
        # What prometheus-k8s.yml relabels into `component`: the pod's own label.
        pods = [workload["spec"]["template"]["metadata"] for workload in mesh_workloads(docs)]
        scraped = {
            pod["labels"].get("app.kubernetes.io/component")
            for pod in pods
            if pod.get("annotations", {}).get("prometheus.io/scrape") == "true"
        }
        assert components_in_alerts() <= scraped, (overlay, scraped)


def test_compose_mounts_the_rules_beside_the_config():
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    volumes = compose["services"]["prometheus"]["volumes"]
    assert f"./prometheus/alerts.yml:{RULES_PATH}:ro" in volumes


def test_k8s_ships_the_rules_in_the_config_map_prometheus_mounts():
    kustomization = yaml.safe_load((DEPLOY / "prometheus" / "kustomization.yaml").read_text())
    (generator,) = [
        g for g in kustomization["configMapGenerator"] if g["name"] == "prometheus-config"
    ]
    assert "alerts.yml" in generator["files"]
    documents = yaml.safe_load_all((DEPLOY / "prometheus" / "prometheus.yaml").read_text())
    (deployment,) = [d for d in documents if d and d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    config_volume = next(v["name"] for v in pod["volumes"] if "configMap" in v)
    mounts = {m["name"]: m["mountPath"] for c in pod["containers"] for m in c["volumeMounts"]}
    assert mounts[config_volume] == str(Path(RULES_PATH).parent)


# ---- firing: promtool's rule unit tests ------------------------------------------------


@dataclass(frozen=True)
class Case:
    """Series over time (promtool's expanding notation, one sample a minute) and, at each
    evaluation time, the label sets of the alert's firing instances (severity included)."""

    alert: str
    series: Mapping[str, str]
    expect: Mapping[str, list[dict[str, str]]]


CRITICAL = {"severity": "critical"}
WARNING = {"severity": "warning"}
SCHEDULER_UP = 'up{component="scheduler", instance="scheduler:9402"}'
GATEWAY_UP = 'up{component="gateway", instance="gateway:9401"}'
WORKER = {"component": "worker", "instance": "worker:9410"}
LATENCY = 'mediamesh_job_latency_seconds_bucket{queue="image", priority="REALTIME", le="%s"}'
RPC = (
    'mediamesh_rpc_requests_total{component="scheduler", service="mediamesh.v1.Scheduler",'
    ' method="Submit", code="%s"}'
)
MEMORY = '{device="cuda:0", instance="worker:9410"}'

CASES = (
    # A scheduler that stops answering, then one that is gone altogether.
    Case("MediameshSchedulerDown", {SCHEDULER_UP: "1 1 0 0 0 0"}, {"1m": [], "5m": [CRITICAL]}),
    Case("MediameshSchedulerDown", {GATEWAY_UP: "1x5"}, {"3m": [CRITICAL]}),
    Case("MediameshNoGateway", {GATEWAY_UP: "1 1 0 0 0 0"}, {"1m": [], "5m": [CRITICAL]}),
    Case(
        "MediameshTargetDown",
        {'up{component="worker", instance="worker:9410"}': "1 0 0 0 0 0 0 0", SCHEDULER_UP: "0x7"},
        {"3m": [], "7m": [{**WORKER, **WARNING}]},
    ),
    Case(
        "MediameshNoWorkersForQueuedWork",
        {
            'mediamesh_workers{pool="on-demand", state="ready"}': "1 1 0x15",
            'mediamesh_workers{pool="on-demand", state="busy"}': "0x17",
            'mediamesh_queue_depth{queue="image", priority="STANDARD"}': "3x17",
        },
        {"1m": [], "8m": [], "14m": [CRITICAL]},
    ),
    # Every worker gone, with no worker series left to sum.
    Case(
        "MediameshNoWorkersForQueuedWork",
        {'mediamesh_queue_depth{queue="video", priority="BATCH"}': "1x15"},
        {"12m": [CRITICAL]},
    ),
    Case(
        "MediameshNoWorkersForQueuedWork",
        {
            'mediamesh_workers{pool="spot", state="busy"}': "2x15",
            'mediamesh_queue_depth{queue="image", priority="BATCH"}': "40x15",
        },
        {"12m": []},
    ),
    Case(
        "MediameshQueueStalled",
        {
            'mediamesh_queue_depth{queue="video", priority="BATCH"}': "2x25",
            'mediamesh_queue_wait_seconds_count{queue="video", priority="BATCH"}': "5x25",
            'mediamesh_queue_depth{queue="image", priority="BATCH"}': "9x25",
            'mediamesh_queue_wait_seconds_count{queue="image", priority="BATCH"}': "0+4x25",
            # Never dispatched anything: no wait series at all.
            'mediamesh_queue_depth{queue="audio", priority="STANDARD"}': "1x25",
        },
        {
            "5m": [],
            "22m": [{"queue": "video", **CRITICAL}, {"queue": "audio", **CRITICAL}],
        },
    ),
    Case(
        "MediameshSlaMissed",
        {
            LATENCY % "0.1": "0x40",
            LATENCY % "1": "0+10x40",
            LATENCY % "+Inf": "0+10x40",
            'mediamesh_queue_class_sla_seconds{queue="image", priority="REALTIME"}': "0.5x40",
        },
        {"10m": [], "30m": [{"queue": "image", "priority": "REALTIME", **WARNING}]},
    ),
    Case(
        "MediameshSlaMissed",
        {
            LATENCY % "0.1": "0x40",
            LATENCY % "1": "0+10x40",
            LATENCY % "+Inf": "0+10x40",
            'mediamesh_queue_class_sla_seconds{queue="image", priority="REALTIME"}': "2x40",
        },
        {"30m": []},
    ),
    Case(
        "MediameshJobsFailing",
        {
            'mediamesh_jobs_total{queue="image", state="FAILED"}': "0+1x30",
            'mediamesh_jobs_total{queue="image", state="SUCCEEDED"}': "0+9x30",
            'mediamesh_jobs_total{queue="video", state="FAILED"}': "0x30",
            'mediamesh_jobs_total{queue="video", state="SUCCEEDED"}': "0+9x30",
        },
        {"5m": [], "25m": [{"queue": "image", **WARNING}]},
    ),
    Case(
        "MediameshQueueFull",
        {
            'mediamesh_jobs_refused_total{queue="image", reason="queue_full"}': "0+5x20",
            'mediamesh_jobs_refused_total{queue="video", reason="queue_full"}': "3x20",
            'mediamesh_jobs_refused_total{queue="video", reason="tenant_quota"}': "0+5x20",
        },
        {"5m": [], "15m": [{"queue": "image", **WARNING}]},
    ),
    Case(
        "MediameshJobStoreFailing",
        {
            'mediamesh_store_write_failures_total{op="insert"}': "0 0 1x10",
            'mediamesh_store_write_failures_total{op="transition"}': "0x12",
        },
        {"1m": [], "3m": [{"op": "insert", **CRITICAL}], "10m": []},
    ),
    Case(
        "MediameshJobStoreBehind",
        # From 3m on nothing drains: pending from about 8m (the window), firing 5m later.
        {"mediamesh_store_pending_writes": "0 0 0 5x20"},
        {"9m": [], "16m": [WARNING]},
    ),
    # A backlog that comes and goes under load.
    Case("MediameshJobStoreBehind", {"mediamesh_store_pending_writes": "0 3 " * 10}, {"15m": []}),
    Case(
        "MediameshResultsLost",
        {"mediamesh_result_write_failures_total": "0 0 2x10"},
        {"1m": [], "3m": [CRITICAL], "15m": []},
    ),
    Case(
        "MediameshWebhooksGivingUp",
        {
            'mediamesh_webhook_attempts_total{outcome="given_up"}': "0 0 1x5",
            'mediamesh_webhook_attempts_total{outcome="retry"}': "0+3x7",
        },
        {"1m": [], "3m": [{"outcome": "given_up", **WARNING}]},
    ),
    Case(
        "MediameshDeviceMemoryLow",
        {
            "mediamesh_worker_device_memory_free_bytes" + MEMORY: "1e9x20",
            "mediamesh_worker_device_memory_total_bytes" + MEMORY: "80e9x20",
        },
        {"10m": [], "16m": [{"device": "cuda:0", "instance": "worker:9410", **WARNING}]},
    ),
    Case(
        "MediameshDeviceMemoryLow",
        {
            "mediamesh_worker_device_memory_free_bytes" + MEMORY: "40e9x20",
            "mediamesh_worker_device_memory_total_bytes" + MEMORY: "80e9x20",
        },
        {"16m": []},
    ),
    Case(
        "MediameshInternalErrors",
        {RPC % "INTERNAL": "0+1x10", RPC % "INVALID_ARGUMENT": "0+50x10"},
        {
            "2m": [],
            "7m": [
                {
                    "component": "scheduler",
                    "service": "mediamesh.v1.Scheduler",
                    "method": "Submit",
                    **WARNING,
                }
            ],
        },
    ),
    Case(
        "MediameshSchedulerLinkFlapping",
        {
            'mediamesh_gateway_job_link_streams_total{instance="gateway:9401"}': "1+2x6",
            'mediamesh_gateway_job_link_streams_total{instance="gateway-2:9401"}': "1x6",
        },
        {"5m": [{"instance": "gateway:9401", **WARNING}]},
    ),
)


def without_annotations(rules_file: Path, out: Path) -> Path:
    """The rules with their annotations dropped: promtool compares an alert's annotations
    too, and the cases are about when each alert fires and with which labels."""
    document = yaml.safe_load(rules_file.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    out.write_text(yaml.safe_dump(document))
    return out


def promtool_tests(cases: tuple[Case, ...], rules_file: Path) -> dict[str, Any]:
    """promtool's unit-test file for `cases`: one test (input series) per case."""
    tests = []
    for case in cases:
        tests.append(
            {
                "interval": "1m",
                "input_series": [
                    {"series": series, "values": values} for series, values in case.series.items()
                ],
                "alert_rule_test": [
                    {
                        "eval_time": at,
                        "alertname": case.alert,
                        "exp_alerts": [{"exp_labels": labels} for labels in firing],
                    }
                    for at, firing in case.expect.items()
                ],
            }
        )
    return {"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": tests}


def test_every_alert_has_a_firing_case():
    fired = {case.alert for case in CASES if any(case.expect.values())}
    assert fired == {rule["alert"] for rule in alert_rules()}


def check_cases(cases: tuple[Case, ...], tmp_path: Path) -> None:
    """Runs `cases` through promtool against the shipped rules; each must pass."""
    rules = without_annotations(ALERTS_FILE, tmp_path / "alerts.yml")
    test_file = tmp_path / "alerts_test.yml"
    test_file.write_text(yaml.safe_dump(promtool_tests(cases, rules), sort_keys=False))
    tested = run_promtool("test", "rules", str(test_file))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout, tested.stdout


def test_each_alert_fires_when_it_should_and_not_before(tmp_path):
    check_cases(CASES, tmp_path)


def test_a_wrong_expectation_fails_the_promtool_run(tmp_path):
    """The harness can fail: an alert expected where it does not fire is reported."""
    rules = without_annotations(ALERTS_FILE, tmp_path / "alerts.yml")
    wrong = Case(
        "MediameshResultsLost",
        {"mediamesh_result_write_failures_total": "0x10"},
        {"5m": [CRITICAL]},
    )
    test_file = tmp_path / "alerts_test.yml"
    test_file.write_text(yaml.safe_dump(promtool_tests((wrong,), rules), sort_keys=False))
    tested = run_promtool("test", "rules", str(test_file))
    assert tested.returncode != 0 and "MediameshResultsLost" in tested.stdout + tested.stderr
