"""deploy/grafana: the dashboard imports cleanly and every query names real metrics and labels."""

from __future__ import annotations

import re

import pytest
from deploy_support import metric_definitions, unknown_names
from queries import (
    VARIABLE_VALUES,
    dashboard,
    dashboard_panels,
    dashboard_queries,
    deploy_queries,
    keda_queries,
)

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@pytest.fixture(scope="module")
def dash() -> dict:
    return dashboard()


def test_importable_shape(dash):
    assert 36 <= dash["schemaVersion"] <= 41
    assert dash["uid"] and dash["title"]
    (ds_input,) = dash["__inputs"]
    assert ds_input["type"] == "datasource" and ds_input["pluginId"] == "prometheus"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dashboard_panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_every_panel_uses_the_datasource_variable(dash):
    for panel in dashboard_panels(dash):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], f"{panel['title']}: no targets"
        for target in panel["targets"]:
            assert target.get("expr", "").strip(), f"{panel['title']} {target['refId']}: no expr"
            assert target["datasource"] == DATASOURCE, f"{panel['title']} {target['refId']}"


def test_variables_used_are_defined(dash):
    defined = {v["name"] for v in dash["templating"]["list"]}
    for panel in dashboard_panels(dash):
        text = " ".join(
            [panel.get("title", ""), *(t.get("expr", "") for t in panel.get("targets", []))]
        )
        for name in re.findall(r"\$\{?(\w+)", text):
            assert name in defined or name.startswith("__"), (
                f"{panel['title']}: ${name} is undefined"
            )
            assert name in VARIABLE_VALUES or name == "datasource", (
                f"queries.py has no value for ${name}"
            )
        if "repeat" in panel:
            assert panel["repeat"] in defined


def test_all_matches_label_values_beyond_those_listed(dash):
    """A refusal of a model not in the registry is counted under queue "unknown", which the
    Modality variable does not list; "All" must still show it."""
    for variable in dash["templating"]["list"]:
        if variable.get("includeAll"):
            assert variable.get("allValue") == ".*", variable["name"]
    assert re.fullmatch(VARIABLE_VALUES["queue"], "unknown")


def test_required_panels(dash):
    exprs = " ".join(q.expr for q in dashboard_queries())
    for needle in (
        "mediamesh_queue_depth",
        "mediamesh_queue_work_seconds",
        "mediamesh_queue_wait_seconds_bucket",
        "mediamesh_job_latency_seconds_bucket",
        "mediamesh_queue_class_sla_seconds",
        "mediamesh_batch_size_bucket",
        "mediamesh_device_load",
        "mediamesh_jobs_total",
        "mediamesh_preemptions_total",
        "mediamesh_spot_fallbacks_total",
        'mediamesh_rpc_requests_total{code!="OK"}',
    ):
        assert needle in exprs, f"no panel queries {needle}"
    assert exprs.count("histogram_quantile(") >= 6


def test_queries_name_real_metrics_and_labels():
    exposed = metric_definitions()
    for query in [*keda_queries(), *dashboard_queries()]:
        problem = unknown_names(query.expr, exposed)
        assert not problem, f"{query.source}: {problem}"


def test_queries_are_balanced_and_substituted():
    queries = deploy_queries()
    assert len(queries) == len(set(queries)) >= 20
    for expr in queries:
        assert "$" not in expr and "[[" not in expr, expr
        for opening, closing in ("()", "[]", "{}"):
            assert expr.count(opening) == expr.count(closing), expr


def _panel(dash: dict, panel_id: int) -> dict:
    panels = [*dash["panels"], *(p for row in dash["panels"] for p in row.get("panels", []))]
    (panel,) = [p for p in panels if p.get("id") == panel_id]
    return panel


def _excluded(expr: str, label: str) -> set[str]:
    """Values a `label!~"a|b"` or `label!="a"` matcher in `expr` leaves out."""
    out: set[str] = set()
    for op, value in re.findall(rf'\b{label}(!~|!=)"([^"]*)"', expr):
        out |= set(value.split("|")) if op == "!~" else {value}
    return out


def _streaming_rpcs() -> set[str]:
    """Every mesh gRPC method that streams one way or both (Download and Upload too: their
    time is a file's size over the client's bandwidth, not the server's work)."""
    import importlib
    import pkgutil

    import mediamesh.common.generated.inference as inference
    import mediamesh.common.generated.v1 as v1

    found: set[str] = set()
    for package in (v1, inference):
        for module_info in pkgutil.iter_modules(package.__path__):
            if not module_info.name.endswith("_pb2"):
                continue
            module = importlib.import_module(f"{package.__name__}.{module_info.name}")
            for service in module.DESCRIPTOR.services_by_name.values():
                for method in service.methods:
                    if method.client_streaming or method.server_streaming:
                        found.add(method.name)
    return found


def _event_stream_routes() -> set[str]:
    """Route templates of the gateway's HTTP face that answer with server-sent events: the
    request_metrics middleware times them until the stream ends."""
    from types import SimpleNamespace

    from mediamesh.gateway.http.app import create_app

    plane = SimpleNamespace(tenancy=SimpleNamespace(open=True))
    app = create_app(plane, ready=lambda: True, max_body_bytes=1024 * 1024)  # type: ignore[arg-type]
    routes = set()
    for path, operations in app.openapi()["paths"].items():
        for operation in operations.values():
            responses = operation.get("responses", {}).values()
            if any("text/event-stream" in r.get("content", {}) for r in responses):
                routes.add(path)
    return routes


def test_rpc_latency_leaves_out_every_streaming_call(dash):
    streaming = _streaming_rpcs()
    assert {"Download", "Upload", "Attach", "RunBatch"} <= streaming
    expr = _panel(dash, 27)["targets"][0]["expr"]
    missing = streaming - _excluded(expr, "method")
    assert not missing, f"RPC latency p95 includes streaming calls {sorted(missing)}"


def test_http_latency_leaves_out_event_streams(dash):
    streams = _event_stream_routes()
    assert "/v1/jobs/{job_id}/events" in streams
    expr = _panel(dash, 29)["targets"][0]["expr"]
    assert "mediamesh_http_request_seconds_bucket" in expr
    missing = streams - _excluded(expr, "route")
    assert not missing, f"HTTP latency p95 includes event streams {sorted(missing)}"


def test_sla_panels_hold_each_class_to_its_own_sla():
    # The panels used the queue's sla_s alone, so a REALTIME class with a tighter
    # class_sla_s read as within SLA while MediameshSlaMissed fired for it.
    sla_queries = [q.expr for q in dashboard_queries() if "sla_seconds" in q.expr]
    assert len(sla_queries) >= 3
    for expr in sla_queries:
        assert "mediamesh_queue_class_sla_seconds" in expr, expr
        assert "mediamesh_queue_sla_seconds" not in expr, expr
    share = next(e for e in sla_queries if "histogram_quantile" in e)
    assert "on (queue, priority)" in share and "by (queue, priority, le)" in share
