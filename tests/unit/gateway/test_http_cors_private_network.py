"""Chromium's Private Network Access: a page on a public secure origin reaching a gateway on
loopback or a LAN first sends a preflight with `Access-Control-Request-Private-Network:
true`. A listed origin is granted it; `"*"` grants it to no one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import httpx
from fastapi.testclient import TestClient

from mediamesh.gateway.api.json_plane import JsonPlane
from mediamesh.gateway.http.app import create_app

LISTED = "https://app.example"


def face(origins: list[str]) -> TestClient:
    """The HTTP face over a plane no request here reaches (CORS answers before routes)."""
    plane = cast(JsonPlane, SimpleNamespace(tenancy=SimpleNamespace(open=False)))
    app = create_app(plane, ready=lambda: True, max_body_bytes=1024, cors_origins=origins)
    return TestClient(app)


def private_network_preflight(client: TestClient, origin: str) -> httpx.Response:
    return client.options(
        "/v1/jobs",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
            "Access-Control-Request-Private-Network": "true",
        },
    )


def test_a_listed_origin_may_reach_a_gateway_on_the_private_network() -> None:
    answer = private_network_preflight(face(["*", LISTED]), LISTED)
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-private-network"] == "true"


def test_star_opens_the_private_network_to_no_one() -> None:
    answer = private_network_preflight(face(["*", LISTED]), "https://elsewhere.example")
    assert answer.status_code == 400
    assert "access-control-allow-private-network" not in answer.headers
    assert "gateway.http.cors_origins" in answer.text
