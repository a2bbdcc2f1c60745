"""Tenant names are never empty and match one pattern, checked when the config loads: an API
key whose tenant was "" used to authenticate and see every tenant's jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.common.settings import ConfigError, MeshConfig, load_mesh_config

HASH = "a" * 64


def _load(tmp_path: Path, text: str) -> MeshConfig:
    path = tmp_path / "mesh.yaml"
    path.write_text(text)
    return load_mesh_config(path, environ={})


def _refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    return str(caught.value)


@pytest.mark.parametrize("tenant", ["", "A", "a b", "-a", ".a", "a" * 64, "a/b"])
def test_a_key_whose_tenant_is_not_a_tenant_name_is_refused_at_load(tmp_path: Path, tenant: str):
    message = _refused(
        tmp_path, f"gateway: {{api_keys: [{{sha256: '{HASH}', tenant: '{tenant}'}}]}}\n"
    )
    assert "api_keys.0.tenant" in message and "line 1" in message


def test_an_empty_tenant_from_the_environment_is_refused_naming_the_variable():
    environ = {"MEDIAMESH_GATEWAY__API_KEYS": f'[{{"sha256": "{HASH}", "tenant": ""}}]'}
    with pytest.raises(ConfigError, match="MEDIAMESH_GATEWAY__API_KEYS"):
        load_mesh_config(None, environ=environ)


def test_quota_sections_are_named_by_tenant_names_too(tmp_path: Path):
    assert "tenants" in _refused(tmp_path, "gateway: {tenants: {'': {burst: 5}}}\n")
    assert "tenants" in _refused(tmp_path, "gateway: {tenants: {Team A: {burst: 5}}}\n")


def test_valid_names_and_the_admin_scope_load(tmp_path: Path):
    for name in ("a", "default", "team-7", "acme.prod_eu", "a" * 63):
        config = _load(
            tmp_path, f"gateway: {{api_keys: [{{sha256: '{HASH}', tenant: '{name}'}}]}}\n"
        )
        assert config.gateway.api_keys[0].tenant == name
    config = _load(
        tmp_path,
        f"gateway: {{api_keys: [{{sha256: '{HASH}', tenant: ops, scopes: [admin]}}]}}\n",
    )
    assert config.gateway.api_keys[0].scopes == ["admin"]
    assert "scopes" in _refused(
        tmp_path, f"gateway: {{api_keys: [{{sha256: '{HASH}', tenant: ops, scopes: [root]}}]}}\n"
    )
