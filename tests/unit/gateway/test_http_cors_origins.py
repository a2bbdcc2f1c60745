"""gateway.http.cors_origins "*": CORS reads from any origin, never a switch that turns off
the cross-site write guard, and refused at load on a gateway without API keys."""

from __future__ import annotations

import hashlib

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from mediamesh.common.settings import ConfigError, load_mesh_config
from mediamesh.gateway.http import errors
from mediamesh.gateway.http.origins import CrossSiteGuard

LISTED = "https://app.example"
FOREIGN = "https://evil.example"
HASH = hashlib.sha256(b"key").hexdigest()


def guarded(origins: list[str]) -> TestClient:
    app = FastAPI(dependencies=[Depends(CrossSiteGuard(origins))])
    errors.install(app)

    @app.post("/v1/jobs")
    async def submit() -> dict:
        return {"ok": True}

    @app.get("/v1/jobs")
    async def listing() -> dict:
        return {"ok": True}

    return TestClient(app)


def test_a_star_does_not_let_a_foreign_origin_write() -> None:
    client = guarded(["*"])
    refused = client.post("/v1/jobs", headers={"Origin": FOREIGN})
    assert refused.status_code == 403, refused.text
    assert refused.json()["code"] == "PERMISSION_DENIED"
    assert refused.json()["message"].startswith(f"origin: requests from {FOREIGN} may not")
    assert "'*' admits reads only" in refused.json()["message"]
    # Reads stay open to it (CORS decides what the page may see), and same-origin writes and
    # clients that name no origin are unaffected.
    assert client.get("/v1/jobs", headers={"Origin": FOREIGN}).status_code == 200
    assert client.post("/v1/jobs", headers={"Origin": "http://testserver"}).status_code == 200
    assert client.post("/v1/jobs").status_code == 200


def test_next_to_a_star_a_listed_origin_may_write() -> None:
    client = guarded(["*", LISTED])
    assert client.post("/v1/jobs", headers={"Origin": LISTED}).status_code == 200
    assert client.post("/v1/jobs", headers={"Origin": FOREIGN}).status_code == 403


def test_a_star_without_api_keys_is_refused_at_load_naming_the_setting() -> None:
    environ = {"MEDIAMESH_GATEWAY__HTTP__CORS_ORIGINS": '["*"]'}
    with pytest.raises(ConfigError) as caught:
        load_mesh_config(None, environ=environ)
    message = str(caught.value)
    assert "gateway.http.cors_origins: '*'" in message and "gateway.api_keys" in message


def test_a_star_with_api_keys_or_listed_origins_without_keys_load() -> None:
    keyed = {
        "MEDIAMESH_GATEWAY__HTTP__CORS_ORIGINS": '["*"]',
        "MEDIAMESH_GATEWAY__API_KEYS": f'[{{"sha256": "{HASH}", "tenant": "web"}}]',
    }
    assert load_mesh_config(None, environ=keyed).gateway.http.cors_origins == ["*"]
    listed = {"MEDIAMESH_GATEWAY__HTTP__CORS_ORIGINS": f'["{LISTED}"]'}
    assert load_mesh_config(None, environ=listed).gateway.http.cors_origins == [LISTED]
