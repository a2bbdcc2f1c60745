"""CORS as browsers see it: origins in gateway.http.cors_origins written the browsers' way at
load (so CORS and the cross-site write guard agree on one list), the headers a page on
another origin may read, and preflights counted under the route they ask about."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from mediamesh.common.settings import ConfigError, load_mesh_config
from mediamesh.gateway.api.json_plane import JsonPlane
from mediamesh.gateway.http.app import create_app

ORIGINS_VARIABLE = "MEDIAMESH_GATEWAY__HTTP__CORS_ORIGINS"


def cors_origins(*written: str) -> list[str]:
    listed = ", ".join(f'"{origin}"' for origin in written)
    return load_mesh_config(
        None, environ={ORIGINS_VARIABLE: f"[{listed}]"}
    ).gateway.http.cors_origins


def face(origins: list[str]) -> TestClient:
    """The HTTP face over a plane no request here reaches (CORS answers before routes)."""
    plane = cast(JsonPlane, SimpleNamespace(tenancy=SimpleNamespace(open=False)))
    app = create_app(plane, ready=lambda: True, max_body_bytes=1024, cors_origins=origins)
    return TestClient(app)


def test_origins_are_kept_as_browsers_write_them() -> None:
    assert cors_origins(
        "http://127.0.0.1:21350/",
        "HTTP://LOCALHOST:21351",
        "https://App.Example:443",
        "http://[::1]:8080",
    ) == [
        "http://127.0.0.1:21350",
        "http://localhost:21351",
        "https://app.example",
        "http://[::1]:8080",
    ]


@pytest.mark.parametrize(
    "written",
    [
        "http://app.example/page",
        "http://app.example?x=1",
        "app.example",
        "ftp://app.example",
        "http://u@app.example",
    ],
)
def test_a_value_that_is_not_an_origin_is_refused_naming_the_entry(written: str) -> None:
    with pytest.raises(ConfigError) as caught:
        cors_origins("https://fine.example", written)
    message = str(caught.value)
    assert f"gateway.http.cors_origins[1]: {written!r} is not an origin" in message, message


def test_an_origin_written_otherwise_is_answered_by_cors_and_admitted_by_the_guard() -> None:
    client = face(cors_origins("HTTP://LOCALHOST:21351/"))
    origin = {"Origin": "http://localhost:21351"}
    preflight = client.options(
        "/v1/jobs", headers={**origin, "Access-Control-Request-Method": "POST"}
    )
    assert preflight.headers.get("access-control-allow-origin") == origin["Origin"]
    # The guard admits the same list, no wider: a write from elsewhere is still refused.
    assert (
        client.post("/v1/jobs", headers={"Origin": "http://elsewhere.example"}).status_code == 403
    )


def test_a_page_on_another_origin_may_read_whether_to_retry_and_what_is_allowed() -> None:
    answer = face(["http://page.example"]).get(
        "/healthz", headers={"Origin": "http://page.example"}
    )
    exposed = {
        h.strip().lower() for h in answer.headers["access-control-expose-headers"].split(",")
    }
    assert {"x-should-retry", "allow", "retry-after"} <= exposed


def counted(route: str, method: str) -> float:
    labels = {"route": route, "method": method, "status": "200"}
    return REGISTRY.get_sample_value("mediamesh_http_requests_total", labels) or 0.0


def test_a_preflight_is_counted_under_the_route_it_asks_about() -> None:
    client = face(["http://page.example"])
    asked = {"Origin": "http://page.example", "Access-Control-Request-Method": "GET"}
    before = counted("/v1/jobs/{job_id}/events", "OPTIONS"), counted("unmatched", "OPTIONS")
    assert client.options("/v1/jobs/some-job/events", headers=asked).status_code == 200
    after = counted("/v1/jobs/{job_id}/events", "OPTIONS"), counted("unmatched", "OPTIONS")
    assert after == (before[0] + 1, before[1])
